/** The console's entry: who is signed in, the frame (navigation, sign-out), the current page. */
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, setSignedOutHandler } from "./api.ts";
import { pages } from "./pages/index.ts";
import { Login } from "./pages/login.tsx";
import { match, SECTIONS, useLocation, href, type Page } from "./router.ts";
import { homePath, type Me } from "./session.ts";
import { LiveContext, useLiveStream } from "./live.ts";
import { ConfirmHost, ErrorBox, notify, Toasts } from "./ui.tsx";
import { Component, type ComponentChildren } from "preact";
import "./style.css";

function App() {
  const [me, setMe] = useState<Me | null | undefined>(undefined);
  useEffect(() => {
    setSignedOutHandler(() => {
      setMe((current) => {
        if (current) notify("Your session ended: sign in again.", "error");
        return null;
      });
    });
    api.get("/api/whoami", {}, { quiet401: true }).then(
      (who) => setMe(who.kind === "mgmt" ? who : null),
      () => setMe(null),
    );
  }, []);
  if (me === undefined) return <p class="boot muted">Loading…</p>;
  if (me === null) return <Login onSignedIn={setMe} />;
  return <Frame me={me} onSignedOut={() => setMe(null)} />;
}

function Frame(props: { me: Me; onSignedOut: () => void }) {
  const { me } = props;
  const location = useLocation();
  const [menuOpen, setMenuOpen] = useState(false);
  const visible = pages.filter((p) => !p.visible || p.visible(me));
  const found = match(visible, location.path);
  // The device event stream, open while signed in (the frame is shown only then).
  const live = useLiveStream();
  useEffect(() => {
    setMenuOpen(false);
    document.title = found ? `${found.page.title} · labgate` : "labgate";
    if (!found && location.path === "/") window.location.replace(href(homePath(me)));
  }, [location.path]);

  const signOut = async () => {
    try {
      await api.post("/api/v1/auth/logout");
    } catch {
      // Signed out either way: the cookie is cleared or already gone.
    }
    props.onSignedOut();
  };

  const current = (page: Page) => location.path === page.path || location.path.startsWith(`${page.path}/`);
  return (
    <LiveContext.Provider value={live}>
      <div class="frame">
        <header class="topbar">
          <button type="button" class="menu-button" aria-label="Menu" aria-expanded={menuOpen} onClick={() => setMenuOpen(!menuOpen)}>
            ☰
          </button>
          <a class="brand" href={href(homePath(me))}>
            labgate
          </a>
          <span class={`stream-dot ${live.streaming ? "on" : ""}`} title={live.streaming ? "Live updates on" : "Live updates off (reconnecting)"} />
          <span class="spacer" />
          <span class="who" title={me.scopes.join(", ")}>
            {me.sub}
          </span>
          <button type="button" class="signout" onClick={signOut}>
            Sign out
          </button>
        </header>
        <nav class={`sidebar ${menuOpen ? "open" : ""}`} aria-label="Main" onClick={(e) => (e.target as HTMLElement).closest("a") && setMenuOpen(false)}>
          {SECTIONS.map((section) => {
            const entries = visible.filter((p) => p.nav?.section === section).sort((a, b) => a.nav!.order - b.nav!.order);
            if (entries.length === 0) return null;
            return (
              <div class="nav-section" key={section}>
                <div class="nav-title">{section}</div>
                {entries.map((p) => (
                  <a key={p.path} href={href(p.path)} class={current(p) ? "active" : ""} aria-current={current(p) ? "page" : undefined}>
                    {p.nav!.label}
                  </a>
                ))}
              </div>
            );
          })}
        </nav>
        <main class="content" id="main">
          <Boundary key={location.path}>
            {found ? <found.page.component params={found.params} query={location.query} me={me} /> : location.path === "/" ? null : <ErrorBox error={`no page ${location.path}`} />}
          </Boundary>
        </main>
        <Toasts />
        <ConfirmHost />
      </div>
    </LiveContext.Provider>
  );
}

/** A page that throws while rendering shows its error instead of a blank page. */
class Boundary extends Component<{ children: ComponentChildren }, { error?: string }> {
  override componentDidCatch(error: unknown) {
    this.setState({ error: error instanceof Error ? error.message : String(error) });
  }
  override render() {
    return this.state.error ? <ErrorBox error={`this page failed: ${this.state.error}`} /> : this.props.children;
  }
}

render(<App />, document.getElementById("app")!);
