//! The dead-letter console's process in tests: `dlq-operator console --standalone` on
//! `127.0.0.1:0`, its login link read from stderr, killed on drop.

use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The console process, killed when the test ends (also on a failed assertion).
pub struct Console {
    /// The process.
    pub child: Child,
    /// Its stderr, line by line.
    pub lines: Receiver<String>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The login token.
    pub token: String,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Console {
    /// Starts `console --standalone -f path` on 127.0.0.1:0 and reads the login link.
    pub fn start(path: &str) -> Console {
        let args = ["--standalone", "-f", path];
        let (child, lines, link) = spawn(&args, &[]);
        let (base, token) = link.split_once("/login?token=").expect("a login link");
        assert!(base.starts_with("http://127.0.0.1:"), "{link}");
        assert!(!base.ends_with(":0"), "the real port is printed: {link}");
        Console {
            child,
            lines,
            base: base.to_string(),
            token: token.to_string(),
        }
    }

    /// Starts `console --namespace ns` (the cluster mode) on 127.0.0.1:0 with
    /// `KUBECONFIG=kubeconfig` and reads the address it listens on (`token` is empty:
    /// users log in with their Kubernetes tokens).
    pub fn cluster(kubeconfig: &str, ns: &str) -> Console {
        let (child, lines, said) = spawn(&["--namespace", ns], &[("KUBECONFIG", kubeconfig)]);
        let base = said
            .strip_prefix("listening on ")
            .and_then(|s| s.split(' ').next())
            .unwrap_or_else(|| panic!("an address in {said:?}"))
            .trim_end_matches('/');
        assert!(base.starts_with("http://127.0.0.1:"), "{said}");
        Console {
            base: base.to_string(),
            child,
            lines,
            token: String::new(),
        }
    }

    /// Waits for a stderr line containing every one of `needles`.
    pub fn line_with(&self, needles: &[&str]) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no stderr line with {needles:?}"));
            if needles.iter().all(|n| line.contains(n)) {
                return line;
            }
        }
    }
}

/// Starts `console ARGS --bind-address 127.0.0.1:0 --interval 1s` with `env`: the process,
/// its stderr lines and what its first `console: ` line says.
fn spawn(args: &[&str], env: &[(&str, &str)]) -> (Child, Receiver<String>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .arg("console")
        .args(args)
        .args(["--bind-address", "127.0.0.1:0", "--interval", "1s"])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let lines = super::stderr_lines(&mut child);
    let said = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the console prints where it listens");
        if let Some(said) = line.strip_prefix("console: ") {
            break said.to_string();
        }
    };
    (child, lines, said)
}

/// An HTTP client that does not follow redirects (the tests look at them).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// `pairs` as an `application/x-www-form-urlencoded` body.
pub fn encoded(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// GET `path` with the session `cookie`: status and body.
pub async fn get(c: &Console, cookie: &str, path: &str) -> (u16, String) {
    let r = client()
        .get(format!("{}{path}", c.base))
        .header("cookie", cookie)
        .send()
        .await
        .expect("get");
    (r.status().as_u16(), r.text().await.expect("body"))
}

/// POSTs `form` to `path` with `cookie` and `Origin: origin`: status and body.
pub async fn post_with(
    c: &Console,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
    origin: &str,
) -> (u16, String) {
    let r = client()
        .post(format!("{}{path}", c.base))
        .header("cookie", cookie)
        .header("origin", origin)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(form))
        .send()
        .await
        .expect("post");
    (r.status().as_u16(), r.text().await.expect("body"))
}

/// [`post_with`] from the console's own origin.
pub async fn post(c: &Console, cookie: &str, path: &str, form: &[(&str, &str)]) -> (u16, String) {
    let origin = c.base.clone();
    post_with(c, cookie, path, form, &origin).await
}

/// The value of hidden input `name` in `html`.
pub fn hidden(html: &str, name: &str) -> String {
    let needle = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&needle)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + needle.len();
    html[at..].split('"').next().expect("value").to_string()
}

/// Polls `path` until its page contains `needle` (at most about a minute).
pub async fn page_with(c: &Console, cookie: &str, path: &str, needle: &str) -> String {
    let mut last = String::new();
    for _ in 0..300 {
        let (status, html) = get(c, cookie, path).await;
        assert_eq!(status, 200, "{html}");
        if html.contains(needle) && !html.contains("Scanning") {
            return html;
        }
        last = html;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{path} never showed {needle:?}: {last}");
}

/// POSTs `form` to `path` with `cookie` (no `Origin`): status and `Location` (empty when
/// none).
pub async fn post_for_location(
    c: &Console,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
) -> (u16, String) {
    let r = client()
        .post(format!("{}{path}", c.base))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(form))
        .send()
        .await
        .expect("post");
    let location = r
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (r.status().as_u16(), location)
}

/// Logs in through the form with `token`: the status and the session's `Cookie` value,
/// when one was set.
pub async fn form_login(c: &Console, token: &str) -> (u16, Option<String>) {
    let r = client()
        .post(format!("{}/login", c.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&[("token", token)]))
        .send()
        .await
        .expect("login");
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::to_string);
    (r.status().as_u16(), cookie)
}

/// Logs in with the console's link: the session cookie (`name=value`).
pub async fn login(c: &Console) -> String {
    let r = client()
        .get(format!("{}/login?token={}", c.base, c.token))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 303, "login with the console's link");
    let set = r.headers()["set-cookie"].to_str().expect("ascii");
    set.split(';').next().expect("cookie").to_string()
}

/// The repair form of the dead letter with message_id `id` on the page of DeadLetterQueue
/// `dlq_page` (`/dlq/NS/NAME`), once its scan is done: the form's address, its CSRF token
/// and the scan's generation `g`.
pub async fn repair_form(c: &Console, cookie: &str, dlq_page: &str, id: &str) -> RepairForm {
    let html = page_with(c, cookie, dlq_page, "Last scan").await;
    let (g, csrf) = (hidden(&html, "g"), hidden(&html, "csrf"));
    let (index, page) = first_message(c, cookie, dlq_page, &g, &format!("id%3D{id}")).await;
    assert!(page.contains("id=\"repair-form\""), "{page}");
    RepairForm {
        action: format!("{dlq_page}/messages/{index}/repair"),
        csrf,
        g,
        page,
    }
}

/// The first message that the list of scan `g` of `dlq_page` (`/dlq/NS/NAME`) shows for
/// `filter` (URL-encoded): its index and its page (both read with status 200).
pub async fn first_message(
    c: &Console,
    cookie: &str,
    dlq_page: &str,
    g: &str,
    filter: &str,
) -> (String, String) {
    let (status, list) = get(
        c,
        cookie,
        &format!("{dlq_page}/messages?g={g}&filter={filter}"),
    )
    .await;
    assert_eq!(status, 200, "{list}");
    let index = list
        .split("/messages/")
        .nth(1)
        .and_then(|s| s.split('?').next())
        .expect("a message link")
        .to_string();
    let (status, page) = get(c, cookie, &format!("{dlq_page}/messages/{index}?g={g}")).await;
    assert_eq!(status, 200, "{page}");
    (index, page)
}

/// What [`repair_form`] found.
pub struct RepairForm {
    /// The form's address.
    pub action: String,
    /// The session's CSRF token.
    pub csrf: String,
    /// The scan's generation.
    pub g: String,
    /// The message's page.
    pub page: String,
}

/// Starts the replay of every dead letter of `dlq_page` (`/dlq/NS/NAME`): the dry run,
/// then the confirmed replay; the job's address.
pub async fn start_replay(c: &Console, cookie: &str, dlq_page: &str) -> String {
    let html = page_with(c, cookie, dlq_page, "Last scan").await;
    let csrf = hidden(&html, "csrf");
    let form = [("csrf", csrf.as_str()), ("filter", "")];
    let (status, confirm) = post(c, cookie, &format!("{dlq_page}/replay/preview"), &form).await;
    assert_eq!(status, 200, "{confirm}");
    let action = hidden(&confirm, "action");
    let r = client()
        .post(format!("{}{dlq_page}/replay", c.base))
        .header("cookie", cookie)
        .header("origin", &c.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&[("csrf", &csrf), ("action", &action)]))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 303, "the replay runs as a job");
    r.headers()["location"].to_str().expect("ascii").to_string()
}
