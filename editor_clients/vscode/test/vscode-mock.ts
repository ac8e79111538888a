/**
 * A stand-in for the `vscode` module (aliased in vitest.config.mts): the few classes the extension's
 * logic uses, with VS Code's behaviour where the logic depends on it, plus a TextDocument on a string.
 */
export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

export class SnippetString {
  constructor(readonly value: string) {}
}

export class InlineCompletionItem {
  command?: { command: string; title: string; arguments?: unknown[] };
  constructor(
    readonly insertText: string | SnippetString,
    readonly range?: Range,
  ) {}
}

export class InlineCompletionList {
  constructor(readonly items: InlineCompletionItem[]) {}
}

type Listener = () => void;

export class CancellationTokenSource {
  private listeners: Listener[] = [];
  private cancelled = false;
  readonly token: { readonly isCancellationRequested: boolean; onCancellationRequested(l: Listener): { dispose(): void } };

  constructor() {
    const listeners = () => this.listeners;
    const isCancelled = () => this.cancelled;
    const remove = (listener: Listener) => (this.listeners = this.listeners.filter((l) => l !== listener));
    this.token = {
      get isCancellationRequested() {
        return isCancelled();
      },
      onCancellationRequested(listener: Listener) {
        listeners().push(listener);
        return { dispose: () => remove(listener) };
      },
    };
  }

  cancel(): void {
    if (!this.cancelled) {
      this.cancelled = true;
      for (const listener of [...this.listeners]) {
        listener();
      }
    }
  }

  dispose(): void {
    this.listeners = [];
  }
}

export class Uri {
  private constructor(private readonly value: string) {}
  static parse(value: string): Uri {
    return new Uri(value);
  }
  toString(): string {
    return this.value;
  }
}

/** A TextDocument over a string; offsets in UTF-16 code units like VS Code's. */
export class MockTextDocument {
  version = 1;
  readonly uri: Uri;
  constructor(
    uri: string,
    public text: string,
  ) {
    this.uri = Uri.parse(uri);
  }
  offsetAt(position: Position): number {
    const lines = this.text.split('\n');
    let offset = 0;
    for (let i = 0; i < position.line; i++) {
      offset += lines[i].length + 1;
    }
    return offset + Math.min(position.character, lines[position.line]?.length ?? 0);
  }
  positionAt(offset: number): Position {
    const before = this.text.slice(0, Math.max(0, Math.min(offset, this.text.length)));
    const lines = before.split('\n');
    return new Position(lines.length - 1, lines[lines.length - 1].length);
  }
  getText(range?: Range): string {
    if (!range) {
      return this.text;
    }
    return this.text.slice(this.offsetAt(range.start), this.offsetAt(range.end));
  }
  /** Type `text` at the end of the document (a new version, as an edit makes). */
  type(text: string): void {
    this.text += text;
    this.version += 1;
  }
  end(): Position {
    return this.positionAt(this.text.length);
  }
}

export const workspace = {};
export const window = {};
export const commands = { executeCommand: async () => undefined };
