/**
 * `codecue/cursorMoved`: tell the server where the cursor came to rest, so it warms its caches for that
 * place before the first keystroke there (see docs/server.md).
 *
 * Every cursor move (selection change, another editor becoming active) restarts one timer; when it runs
 * out (`codecue.cursorMoved.debounceMs` after the last move) the notification goes out for the active
 * editor's cursor, unless the host says not to: suggestions off or the server not running, a document
 * the server does not complete, a suggestion shown or generating there, or a place the server already
 * knows (the last one sent, or where the last completion was asked for, at the same document version).
 * No `vscode` import here, so it is testable in plain Node.
 */
import { CursorMovedParams } from './protocol';

/** A cursor position in a document version; `line`/`character` in LSP terms (UTF-16 code units). */
export interface CursorPlace {
  uri: string;
  version: number;
  line: number;
  character: number;
}

export interface CursorMovedOptions {
  enabled: boolean;
  debounceMs: number;
}

export interface CursorMovedHost {
  /** Suggestions on and the server running. */
  active(): boolean;
  /** The active editor's cursor when its document is one the server completes, else undefined. */
  current(): CursorPlace | undefined;
  /** The server is busy at or already knows this place (a suggestion shown or generating, asked there). */
  known(place: CursorPlace): boolean;
  send(params: CursorMovedParams): void;
}

export function cursorMovedParams(place: CursorPlace): CursorMovedParams {
  return { textDocument: { uri: place.uri }, position: { line: place.line, character: place.character } };
}

export function samePlace(a: CursorPlace | undefined, b: CursorPlace | undefined): boolean {
  return (
    a !== undefined &&
    b !== undefined &&
    a.uri === b.uri &&
    a.version === b.version &&
    a.line === b.line &&
    a.character === b.character
  );
}

export class CursorMovedNotifier {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private lastSent: CursorPlace | undefined;

  constructor(
    private readonly host: CursorMovedHost,
    private options: CursorMovedOptions,
  ) {}

  /** The cursor moved: send after the pause, unless it moves again first. */
  moved(): void {
    this.cancel();
    if (!this.options.enabled) {
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.fire();
    }, this.options.debounceMs);
  }

  /** Drop the pending notification, if any. */
  cancel(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  /** New settings (a pending notification is dropped when turned off). */
  update(options: CursorMovedOptions): void {
    this.options = options;
    if (!options.enabled) {
      this.cancel();
    }
  }

  /** The server (re)started: it knows no place. */
  reset(): void {
    this.lastSent = undefined;
  }

  dispose(): void {
    this.cancel();
  }

  private fire(): void {
    if (!this.options.enabled || !this.host.active()) {
      return;
    }
    const place = this.host.current();
    if (!place || samePlace(place, this.lastSent) || this.host.known(place)) {
      return;
    }
    this.lastSent = place;
    this.host.send(cursorMovedParams(place));
  }
}
