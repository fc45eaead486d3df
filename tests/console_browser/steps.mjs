// Steps both browser scripts (console.mjs, cluster.mjs) take.

// The environment variable `k`; throws when it is not set.
export const env = (k) => {
  const v = process.env[k];
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};

// Throws `check failed: what` unless `ok`.
export const check = (ok, what) => {
  if (!ok) throw new Error(`check failed: ${what}`);
};

// Prints one JSON line for a step.
export const report = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));

// On a DeadLetterQueue's page: its group row of error class `cls` once the background
// scan is done (the page refreshes itself meanwhile; reloaded here until the row shows,
// at most 60 s).
export async function groupRow(page, cls) {
  const row = page.locator('tr', { hasText: cls }).filter({ has: page.getByRole('link', { name: 'messages' }) });
  const deadline = Date.now() + 60_000;
  while ((await row.count()) === 0) {
    check(Date.now() < deadline, `a group of class ${cls} within 60 s`);
    await page.waitForTimeout(500);
    await page.reload();
  }
  return row;
}
