/**
 * Passwords out of anything shardflake prints: messages, URLs, connection strings. Redaction parses rather than
 * pattern-matches one shape, because the shapes that leak are the unusual ones:
 *
 * - URLs (`postgres://user:secret@host/db`), including passwords that contain `/`, `@`, `:` or `?` unencoded
 *   (malformed, but typed by people): the userinfo runs to the last `@` of the URL's token, so everything between
 *   the first `:` after `//` and that `@` is masked. A URL whose userinfo holds no `:` has no password to mask.
 * - Query parameters `?password=…`, `&sslpassword=…` (libpq accepts every keyword there).
 * - key=value connection strings (`host=h password=secret`, `password = 'it''s quoted'`, `PGPASSWORD=…`).
 *
 * Over-masking is the safe side: an odd URL may lose a little more than its password, never keep it.
 */
const MASK = '****';

/** Keywords whose value is a secret (libpq's `password`, `sslpassword`; the environment's `PGPASSWORD`). */
const SECRET_KEY = /^(?:pg|ssl)?password$/i;

/**
 * A URL's token: a scheme, `//`, then everything up to whitespace. Quotes and brackets stay in the token (a raw
 * password may hold them; a closing quote after the URL costs nothing), so the userinfo's last `@` is found.
 */
const URL_TOKEN = /\b[a-z][a-z0-9+.-]*:\/\/\S*/gi;

/** A secret keyword outside URLs and its `=`; its value is read by `valueEnd`. */
const SECRET_ASSIGNMENT = /\b(?:pg|ssl)?password\s*=\s*/gi;

/**
 * Where a key=value secret starting at `start` ends. An unquoted value runs to whitespace. A quoted one is read
 * both as libpq reads it (`\'` escapes a quote) and as SQL does (a backslash is itself, `''` is a quote), and the
 * longer reading wins: the value may hold spaces, quotes and what looks like the next `key=`, and masking a little
 * more than the password is the safe side. Without a closing quote, the value runs to the end of the line.
 */
function valueEnd(text: string, start: number): number {
  const quote = text[start];
  if (quote !== "'" && quote !== '"') {
    const space = text.slice(start).search(/\s/);
    return space === -1 ? text.length : start + space;
  }
  return Math.max(quotedEnd(text, start, quote, true), quotedEnd(text, start, quote, false));
}

function quotedEnd(text: string, start: number, quote: string, backslashEscapes: boolean): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text[i];
    if (c === '\n') return i;
    if (backslashEscapes && c === '\\') i++;
    else if (c === quote) {
      if (text[i + 1] !== quote) return i + 1;
      i++;
    }
  }
  return text.length;
}

/** The [start, end) of every key=value secret's value in `text`, in order, none inside another. */
function secretValues(text: string): [number, number][] {
  const spans: [number, number][] = [];
  for (const m of text.matchAll(SECRET_ASSIGNMENT)) {
    if (m.index < (spans.at(-1)?.[1] ?? 0)) continue;
    const start = m.index + m[0].length;
    spans.push([start, valueEnd(text, start)]);
  }
  return spans;
}

function redactUrlToken(token: string): string {
  const start = token.indexOf('//') + 2;
  let out = token;
  const at = token.lastIndexOf('@');
  if (at > start) {
    const userinfo = token.slice(start, at);
    const colon = userinfo.indexOf(':');
    if (colon !== -1) out = `${token.slice(0, start + colon + 1)}${MASK}${token.slice(at)}`;
  }
  // Query parameters: each `key=value` after `?` up to `&` or `#`.
  const q = out.indexOf('?', out.lastIndexOf('@') + 1);
  if (q === -1) return out;
  const [query, fragment] = splitOnce(out.slice(q + 1), '#');
  const params = query.split('&').map((pair) => {
    const eq = pair.indexOf('=');
    if (eq === -1) return pair;
    const key = safeDecode(pair.slice(0, eq));
    return SECRET_KEY.test(key) ? `${pair.slice(0, eq)}=${MASK}` : pair;
  });
  return `${out.slice(0, q + 1)}${params.join('&')}${fragment === undefined ? '' : `#${fragment}`}`;
}

function splitOnce(text: string, separator: string): [string, string | undefined] {
  const i = text.indexOf(separator);
  return i === -1 ? [text, undefined] : [text.slice(0, i), text.slice(i + 1)];
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** `text` with every password it holds (in URLs, query parameters and key=value strings) replaced by `****`. */
export function redactText(text: string): string {
  // A key=value secret may itself look like a URL (`password=ab://cd`): a URL token that starts inside such a value
  // is part of the value, left to the key=value pass (read as a URL it has no userinfo, and would be kept whole).
  const values = secretValues(text);
  const inValue = (at: number) => values.some(([start, end]) => at >= start && at < end);
  // URLs first (their query may hold `password=`); then key=value pairs in what lies between them.
  let out = '';
  let last = 0;
  for (const match of text.matchAll(URL_TOKEN)) {
    if (inValue(match.index)) continue;
    out += redactConninfo(text.slice(last, match.index)) + redactUrlToken(match[0]);
    last = match.index + match[0].length;
  }
  return out + redactConninfo(text.slice(last));
}

function redactConninfo(text: string): string {
  let out = '';
  let last = 0;
  for (const [start, end] of secretValues(text)) {
    out += `${text.slice(last, start)}${MASK}`;
    last = end;
  }
  return out + text.slice(last);
}

/**
 * One server's URL as shardflake prints it: `postgres://user:****@host:port/db`, without query secrets. A URL that
 * does not parse is not echoed at all (it may be a password pasted in the wrong place): only its scheme is shown.
 */
export function describeServerUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(url)?.[1];
    return scheme ? `${scheme}://… (not shown: it does not parse)` : '(not shown: not a URL)';
  }
  return redactText(parsed.toString());
}
