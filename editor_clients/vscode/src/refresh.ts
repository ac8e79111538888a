/**
 * Re-showing the inline suggestion while the `codecue/partialCompletion` stream grows.
 *
 * Measured in a real VS Code (code-server 4.139 / VS Code 1.139, the e2e in `e2e/`): while a suggestion is
 * on screen, `editor.action.inlineSuggest.trigger` does not query the provider again, so the ghost text
 * stayed at the stream's first piece. Hiding the suggestion first makes the trigger query again, and the
 * provider answers with the text so far. Requests that arrive while a refresh runs are coalesced into one
 * more refresh, so a fast stream costs at most one hide/trigger pair at a time.
 */
export class Refresher {
  private running = false;
  private pending = false;

  constructor(private readonly refresh: () => Promise<void>, private readonly log?: (message: string) => void) {}

  request(): void {
    if (this.running) {
      this.pending = true;
      return;
    }
    void this.run();
  }

  private async run(): Promise<void> {
    this.running = true;
    try {
      do {
        this.pending = false;
        try {
          await this.refresh();
        } catch (error) {
          this.log?.(`refreshing the inline suggestion failed: ${String(error)}`);
        }
      } while (this.pending);
    } finally {
      this.running = false;
    }
  }
}
