/** How many in-flight requests an uncaught exception's log line lists at most. */
const LISTED = 20;

/**
 * The requests a server is handling (`METHOD /path [request id]`), for the one log line of an
 * uncaught exception: its state is unknown, so the process ends, and the line names the requests
 * that were in flight (the one that threw among them). A Set add/delete per request; no
 * AsyncLocalStorage, whose promise hooks would cost every request on Node 20.
 */
export class InFlight {
  private readonly requests = new Set<string>();

  add(label: string): () => void {
    this.requests.add(label);
    return () => void this.requests.delete(label);
  }

  describe(): string {
    if (this.requests.size === 0) return "no request in flight";
    const listed = [...this.requests].slice(-LISTED);
    const more = this.requests.size - listed.length;
    return `requests in flight: ${listed.join(", ")}${more > 0 ? ` and ${more} more` : ""}`;
  }
}
