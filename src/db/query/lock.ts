/** A first-come, first-served lock: who holds it releases it, and the next waiter gets it. */
export class Lock {
  private held = false;
  private readonly waiters: Array<() => void> = [];

  /** Whether someone holds it now. */
  get busy(): boolean {
    return this.held;
  }

  acquire(): Promise<void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.held = false;
  }
}
