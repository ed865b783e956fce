import { useState } from "preact/hooks";
import { api, messageOf } from "../api.ts";
import type { Me } from "../session.ts";
import { Toasts } from "../ui.tsx";

export function Login(props: { onSignedIn: (me: Me) => void }) {
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget as HTMLFormElement);
    setBusy(true);
    setError(undefined);
    try {
      const me = await api.post("/api/v1/auth/login", {}, { username: String(form.get("username") ?? ""), password: String(form.get("password") ?? "") }, { quiet401: true });
      props.onSignedIn(me);
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="login-page">
      <form class="login card" onSubmit={submit}>
        <div class="brand big">labgate</div>
        <p class="muted">Sign in to the console.</p>
        <label class="field">
          <span class="field-label">Username</span>
          <input name="username" autocomplete="username" required autofocus />
        </label>
        <label class="field">
          <span class="field-label">Password</span>
          <input name="password" type="password" autocomplete="current-password" required />
        </label>
        {error && (
          <p class="form-error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
        <p class="hint">
          {/* The data dir's path is the server's business: a signed-out page names it only as the option that sets it. */}
          First start: the user <code>admin</code>, with the password in <code>&lt;data dir&gt;/admin.password</code> on the server (<code>--data-dir</code>, <code>./data</code>{" "}
          by default; the server's log names the file when it writes it).
        </p>
      </form>
      <Toasts />
    </div>
  );
}
