/**
 * Debounce for completion requests: each new wait cancels the previous one, so while the user types only
 * the last keystroke's request goes to the server.
 */

export interface CancellationLike {
  readonly isCancellationRequested: boolean;
  onCancellationRequested(listener: () => void): { dispose(): void };
}

export class Debouncer {
  private pending: { timer: ReturnType<typeof setTimeout>; resolve: (go: boolean) => void } | undefined;

  constructor(public delayMs: number) {
    if (!(delayMs >= 0)) {
      throw new RangeError(`debounce delay must be >= 0 ms, got ${delayMs}`);
    }
  }

  /**
   * Resolves true after the delay, or false as soon as a newer wait starts or `token` is cancelled.
   */
  wait(token?: CancellationLike): Promise<boolean> {
    this.cancel();
    if (token?.isCancellationRequested) {
      return Promise.resolve(false);
    }
    return new Promise<boolean>((resolve) => {
      let subscription: { dispose(): void } | undefined;
      const finish = (go: boolean) => {
        subscription?.dispose();
        if (this.pending?.resolve === settle) {
          this.pending = undefined;
        }
        resolve(go);
      };
      const settle = (go: boolean) => {
        clearTimeout(timer);
        finish(go);
      };
      const timer = setTimeout(() => finish(true), this.delayMs);
      this.pending = { timer, resolve: settle };
      subscription = token?.onCancellationRequested(() => settle(false));
    });
  }

  /** Cancel the pending wait (it resolves false). */
  cancel(): void {
    const pending = this.pending;
    this.pending = undefined;
    pending?.resolve(false);
  }
}
