/**
 * The repeat pattern language: pytest's `-k` expressions.
 *
 *   expression := expr? EOF
 *   expr       := and_expr ("or" and_expr)*
 *   and_expr   := not_expr ("and" not_expr)*
 *   not_expr   := "not" not_expr | "(" expr ")" | ident
 *
 * An identifier holds for a case when it is a case-insensitive substring of any of its names.
 */

export class PatternError extends Error {}

/** Tests a case given all the names it is matched against. */
export type Matcher = (names: readonly string[]) => boolean;

type Token = { kind: "lparen" | "rparen" | "or" | "and" | "not" | "eof"; text: string; pos: number } | { kind: "ident"; text: string; pos: number };

// Word characters (any Unicode letter/digit/underscore) plus the extra characters pytest allows.
const IDENT = /[\p{L}\p{N}_:+\-.[\]\\/]+/uy;

function tokenize(input: string): Token[] {
  const tokens: Token[] = [];
  let pos = 0;
  while (pos < input.length) {
    const ch = input[pos];
    if (/\s/u.test(ch)) {
      pos++;
      continue;
    }
    if (ch === "(" || ch === ")") {
      tokens.push({ kind: ch === "(" ? "lparen" : "rparen", text: ch, pos });
      pos++;
      continue;
    }
    IDENT.lastIndex = pos;
    const match = IDENT.exec(input);
    if (!match) throw new PatternError(`at column ${pos + 1}: unexpected character ${JSON.stringify(ch)}`);
    const text = match[0];
    const kind = text === "or" || text === "and" || text === "not" ? text : "ident";
    tokens.push({ kind, text, pos } as Token);
    pos += text.length;
  }
  tokens.push({ kind: "eof", text: "end of input", pos });
  return tokens;
}

/** Hostile input must not exhaust the stack or the CPU. */
export const MAX_PATTERN_LENGTH = 4096;
const MAX_DEPTH = 100;

/** Parses a pattern; throws PatternError with a pytest-like message. An empty pattern matches everything. */
export function compilePattern(pattern: string): Matcher {
  if (pattern.length > MAX_PATTERN_LENGTH) throw new PatternError(`longer than ${MAX_PATTERN_LENGTH} characters`);
  const tokens = tokenize(pattern);
  let depth = 0;
  let i = 0;
  const peek = () => tokens[i];
  const expected = (what: string): never => {
    const t = peek();
    throw new PatternError(`at column ${t.pos + 1}: expected ${what}; got ${t.kind === "eof" ? "end of input" : t.text}`);
  };

  if (peek().kind === "eof") return () => true;

  const expr = (): Matcher => {
    let left = andExpr();
    while (peek().kind === "or") {
      i++;
      const l = left;
      const r = andExpr();
      left = (names) => l(names) || r(names);
    }
    return left;
  };
  const andExpr = (): Matcher => {
    let left = notExpr();
    while (peek().kind === "and") {
      i++;
      const l = left;
      const r = notExpr();
      left = (names) => l(names) && r(names);
    }
    return left;
  };
  const notExpr = (): Matcher => {
    const t = peek();
    if (++depth > MAX_DEPTH) throw new PatternError(`nested more than ${MAX_DEPTH} levels deep`);
    try {
      return notInner(t);
    } finally {
      depth--;
    }
  };
  const notInner = (t: Token): Matcher => {
    if (t.kind === "not") {
      i++;
      const inner = notExpr();
      return (names) => !inner(names);
    }
    if (t.kind === "lparen") {
      i++;
      const inner = expr();
      if (peek().kind !== "rparen") expected("right parenthesis");
      i++;
      return inner;
    }
    if (t.kind === "ident") {
      i++;
      const needle = t.text.toLowerCase();
      return (names) => names.some((n) => n.toLowerCase().includes(needle));
    }
    return expected("not OR left parenthesis OR identifier");
  };

  const matcher = expr();
  if (peek().kind !== "eof") expected("end of input");
  return matcher;
}

/** Checks a pattern on arrival; returns the error message (without prefix) or undefined. */
export function patternError(pattern: string): string | undefined {
  try {
    compilePattern(pattern);
    return undefined;
  } catch (error) {
    if (error instanceof PatternError) return error.message;
    throw error;
  }
}
