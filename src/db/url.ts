/** What labgate prints of a database URL: never its password, in a log line or an error. */

/** `url` with its password as `***` (the whole URL, when it does not parse, as words that say so). */
export function redactedUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    for (const key of [...parsed.searchParams.keys()]) if (/pass|secret|key/i.test(key)) parsed.searchParams.set(key, "***");
    return parsed.href;
  } catch {
    return "(the given URL)";
  }
}

/** `text` with every occurrence of `url` redacted and its password (raw or percent-decoded) replaced by `***`. */
export function redactedText(text: string, url: string): string {
  let out = text.split(url).join(redactedUrl(url));
  let password = "";
  try {
    password = new URL(url).password;
  } catch {
    return out;
  }
  for (const secret of new Set([password, safeDecode(password)])) if (secret) out = out.split(secret).join("***");
  return out;
}

const safeDecode = (text: string) => {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
};
