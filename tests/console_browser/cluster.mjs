// Drives Debian's Chromium (playwright-core) through the dead-letter console in cluster
// mode, for tests/e2e_console.rs. Input in the environment: BASE (http://127.0.0.1:PORT),
// NS and NAME (the DeadLetterQueue), CLASS (the error class of its one dead letter),
// NOBODY_TOKEN (a ServiceAccount token without RBAC), ACTOR_TOKEN (one that may view and
// act), CHROMIUM (the browser's path).
// Prints one JSON line per step ({"step": …, …}) and exits 1 at the first failed check.

import { chromium } from 'playwright-core';
import { check, env, groupRow as groupRowOf, report } from './steps.mjs';

const [BASE, NS, NAME, CLASS, NOBODY_TOKEN, ACTOR_TOKEN, CHROMIUM] = [
  'BASE', 'NS', 'NAME', 'CLASS', 'NOBODY_TOKEN', 'ACTOR_TOKEN', 'CHROMIUM',
].map(env);

const key = `${NS}/${NAME}`;

// Logs in through the form in a fresh context (its own cookies): the page and the
// status of the form's POST.
async function logIn(browser, token) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const page = await context.newPage();
  const shown = await page.goto(`${BASE}/login`);
  check(shown.status() === 200, `the login form answers ${shown.status()}`);
  await page.locator('#login-token').fill(token);
  const [posted] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST'),
    page.locator('#login-submit').click(),
  ]);
  await page.waitForLoadState();
  return { page, status: posted.status() };
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
try {
  // 1. No session: refused; a made-up token: the form again, 401.
  const context = await browser.newContext();
  const anonymous = await context.newPage();
  const response = await anonymous.goto(`${BASE}/`);
  check(response.status() === 401, `GET / without a session answers 401, not ${response.status()}`);
  const wrong = await logIn(browser, 'not-a-token');
  check(wrong.status === 401, `a made-up token answers 401, not ${wrong.status}`);
  check(await wrong.page.locator('#login-error').isVisible(), 'the form says the token was refused');
  report('refused without a valid token', { status: wrong.status });

  // 2. A token without RBAC: logged in, but the index lists nothing and the page is 403.
  const nobody = await logIn(browser, NOBODY_TOKEN);
  check(nobody.status === 303, `the nobody token logs in (303), not ${nobody.status}`);
  check((await nobody.page.getByRole('link', { name: key }).count()) === 0, `${key} is not listed for nobody`);
  const refused = await nobody.page.goto(`${BASE}/dlq/${key}`);
  const text = await nobody.page.locator('body').innerText();
  check(refused.status() === 403 && text.includes('get on deadletterqueues'), `403 naming the RBAC, not ${refused.status()}: ${text.slice(0, 200)}`);
  report('refused without RBAC', { status: refused.status() });

  // 3. The actor: listed, the dead letter under its class, the dry run of its replay counts it.
  const actor = await logIn(browser, ACTOR_TOKEN);
  check(actor.status === 303, `the actor token logs in (303), not ${actor.status}`);
  const page = actor.page;
  await page.getByRole('link', { name: key }).click();
  const groupRow = await groupRowOf(page, CLASS);
  const [preview] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST'),
    groupRow.first().getByRole('button', { name: 'replay…' }).click(),
  ]);
  const count = await page.locator('#count').innerText();
  check(preview.status() === 200 && count.trim() === '1', `the dry run (POST, same origin) counts 1: ${preview.status()}, ${count}`);
  report('actor counts the replay', { count: count.trim() });
} catch (e) {
  report('failed', { error: String(e && e.message ? e.message : e) });
  process.exitCode = 1;
} finally {
  await browser.close();
}
