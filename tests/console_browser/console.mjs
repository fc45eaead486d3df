// Drives Debian's Chromium (playwright-core) through the dead-letter console, for
// tests/console_browser.rs. Input in the environment:
//   BASE (http://127.0.0.1:PORT), TOKEN (the login token), NS and NAME (the
//   DeadLetterQueue), DEPTH (its dead letters, as the index shows them), MESSAGE_ID (a dead letter of class CLASS whose body is repaired to
//   REPAIRED_BODY), HOSTILE (the text of one of its headers, to be shown inert), SHOTS (a
//   directory for screenshots), CHROMIUM (the browser's path).
// Prints one JSON line per step ({"step": …, …}) and exits 1 at the first failed check.

import { chromium } from 'playwright-core';
import { check, env, groupRow as groupRowOf, report } from './steps.mjs';

const [BASE, TOKEN, NS, NAME, DEPTH, MESSAGE_ID, CLASS, REPAIRED_BODY, HOSTILE, SHOTS, CHROMIUM] = [
  'BASE', 'TOKEN', 'NS', 'NAME', 'DEPTH', 'MESSAGE_ID', 'CLASS', 'REPAIRED_BODY', 'HOSTILE', 'SHOTS', 'CHROMIUM',
].map(env);


const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const page = await context.newPage();
  const dialogs = [];
  page.on('dialog', async (d) => {
    dialogs.push(d.message());
    await d.dismiss();
  });

  // 1. No token, or a wrong one: refused.
  let response = await page.goto(`${BASE}/`);
  check(response.status() === 401, `GET / without a token answers 401, not ${response.status()}`);
  response = await page.goto(`${BASE}/login?token=not-the-token`);
  check([401, 403].includes(response.status()), `a wrong token is refused, not ${response.status()}`);
  report('refused without the token', { status: response.status() });

  // 2. The login link: the index lists the DeadLetterQueue.
  response = await page.goto(`${BASE}/login?token=${TOKEN}`);
  check(response.ok(), `the login link answers ${response.status()}`);
  const key = `${NS}/${NAME}`;
  await page.getByRole('link', { name: key }).waitFor({ timeout: 10_000 });
  // Its dead-letter depth once the console's first poll is in (the page is reloaded).
  const depthCell = page.locator('tr', { hasText: key }).locator('td.num').first();
  const polled = Date.now() + 30_000;
  while ((await depthCell.innerText()).trim() !== DEPTH) {
    check(Date.now() < polled, `the index shows depth ${DEPTH} within 30 s, not ${await depthCell.innerText()}`);
    await page.waitForTimeout(500);
    await page.reload();
  }
  await page.screenshot({ path: `${SHOTS}/console-index.png`, fullPage: true });
  report('index', { depth: DEPTH });

  // 3. Its page: the dead letter under its class once the background scan is done (the
  // page refreshes itself meanwhile; reloaded here until the group shows).
  await page.getByRole('link', { name: key }).click();
  const groupRow = await groupRowOf(page, CLASS);
  await page.screenshot({ path: `${SHOTS}/console-dead-letter-queue.png`, fullPage: true });
  report('groups', { rows: await page.locator('tr').count() });

  // 4. The group's messages, then the message: the hostile header is shown as text.
  await groupRow.first().getByRole('link', { name: 'messages' }).click();
  await page.getByRole('link', { name: MESSAGE_ID }).click();
  await page.getByRole('heading', { name: /message/ }).first().waitFor();
  const text = await page.locator('body').innerText();
  const note = text.split('\n').find((l) => l.includes('x-note')) || '(no x-note line)';
  const escEscaped = !note.includes('\x1b') && /\\u(001b|\{1b\})\[2J/.test(note);
  check(note.includes('<script>window.__xss=1</script>') && escEscaped, `the hostile header is shown as text, its ESC escaped: ${note}`);
  check((await page.evaluate(() => window.__xss)) === undefined, 'no script of the header ran');
  check(dialogs.length === 0, `no dialog opened (${dialogs})`);
  await page.screenshot({ path: `${SHOTS}/console-message.png`, fullPage: true });
  report('message', { hostile_inert: true });

  // 5. Repair: invalid JSON refused with its position, the text kept; then the fix.
  await page.locator('#repair-body').fill('{"orderId": 7,');
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST'),
    page.locator('#repair-submit').click(),
  ]);
  const refusal = await page.locator('body').innerText();
  check(refused.status() === 400, `invalid JSON answers 400, not ${refused.status()}: ${refusal.slice(0, 300)}`);
  check(/line \d+/.test(refusal) && /column \d+/.test(refusal), 'the refusal names the line and column');
  check((await page.locator('#repair-body').inputValue()) === '{"orderId": 7,', 'the edited text is kept');
  report('invalid JSON refused', { status: refused.status() });
  await page.locator('#repair-body').fill(REPAIRED_BODY);
  const [done] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST'),
    page.locator('#repair-submit').click(),
  ]);
  check(done.ok(), `the repair answers ${done.status()}`);
  const result = await page.locator('body').innerText();
  check(/repaired/i.test(result), `the result page says repaired: ${result.slice(0, 300)}`);
  await page.screenshot({ path: `${SHOTS}/console-repaired.png`, fullPage: true });
  report('repaired', { status: done.status() });
} catch (e) {
  report('failed', { error: String(e && e.message ? e.message : e) });
  process.exitCode = 1;
} finally {
  await browser.close();
}
