import assert from 'node:assert/strict';

/**
 * The password in a server's URL: the secret a "nothing printed" check must look for. Each embedded server has its
 * own random password, so a check for a fixed literal could never fail; it is asserted non-empty because an empty
 * one would make such a check meaningless.
 */
export function passwordOf(url: string): string {
  const password = decodeURIComponent(new URL(url).password);
  assert.ok(password.length > 0, `the server URL carries a password`);
  return password;
}

/** Fails if `text` contains the password of any of `urls`, in any form (URL, conninfo, quoted). */
export function assertNoPassword(text: string, urls: readonly string[], where = 'the output'): void {
  // The message names the place, not the text: the text would print the password into the test log.
  for (const url of urls) assert.ok(!text.includes(passwordOf(url)), `a server's password is in ${where}`);
}
