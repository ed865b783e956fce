/**
 * The device terminal (loaded on demand: @xterm/xterm is a chunk of its own). It speaks the
 * shell WebSocket /api/v1/devices/{mac}/shell (the session cookie authenticates the upgrade).
 * The device side has no PTY, so lines are edited here: typed text is echoed locally and sent
 * with Enter; Ctrl-C and Ctrl-D go through as they are.
 */
import { Terminal } from "@xterm/xterm";

function loadCss() {
  const url = document.documentElement.dataset.xtermCss;
  if (!url || document.querySelector(`link[href="${url}"]`)) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = url;
  document.head.appendChild(link);
}

export interface TerminalSession {
  close(): void;
}

export function openTerminal(element: HTMLElement, mac: string, onEnd: (reason: string) => void): TerminalSession {
  loadCss();
  const cols = Math.max(40, Math.floor((element.clientWidth - 16) / 7.8));
  const term = new Terminal({
    cols,
    rows: 20,
    convertEol: true,
    cursorBlink: true,
    fontSize: 13,
    fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace',
    theme: { background: "#0f1522", foreground: "#dfe6f2" },
  });
  term.open(element);
  term.focus();
  const scheme = window.location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${window.location.host}/api/v1/devices/${encodeURIComponent(mac)}/shell`);
  ws.binaryType = "arraybuffer";
  const decoder = new TextDecoder();
  let line = "";
  let open = false;
  term.write("connecting…\r\n");
  ws.onopen = () => {
    open = true;
  };
  ws.onmessage = (event) => term.write(typeof event.data === "string" ? event.data : decoder.decode(new Uint8Array(event.data as ArrayBuffer), { stream: true }));
  ws.onclose = (event) => {
    const reason = event.reason || (event.code === 1000 ? "closed" : `closed (${event.code})`);
    term.write(`\r\n\x1b[2m[${reason}]\x1b[0m\r\n`);
    open = false;
    onEnd(reason);
  };
  term.onData((data) => {
    if (!open) return;
    for (const ch of data) {
      if (ch === "\r") {
        term.write("\r\n");
        ws.send(`${line}\n`);
        line = "";
      } else if (ch === "\x7f" || ch === "\b") {
        if (line.length > 0) {
          line = line.slice(0, -1);
          term.write("\b \b");
        }
      } else if (ch === "\x03" || ch === "\x04") {
        ws.send(ch);
        line = "";
        term.write(ch === "\x03" ? "^C\r\n" : "^D\r\n");
      } else if (ch >= " " || ch === "\t") {
        line += ch;
        term.write(ch);
      }
    }
  });
  return {
    close() {
      ws.close(1000, "closed");
      term.dispose();
    },
  };
}
