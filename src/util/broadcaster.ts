/** In-process publish/subscribe: one broken subscriber never stops the others (or the publisher). */
export class Broadcaster<T> {
  private readonly listeners = new Set<(value: T) => void>();

  subscribe(listener: (value: T) => void): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  emit(value: T): void {
    for (const listener of this.listeners) {
      try {
        listener(value);
      } catch {
        // ignored: see the class comment
      }
    }
  }

  get subscribers(): number {
    return this.listeners.size;
  }
}
