/**
 * A small LRU cache of completions with type-through reuse.
 *
 * An entry remembers where a completion started (document, offset, and a little text before it) and the
 * completion's text. When the user types characters that match the suggestion, a lookup at the new
 * cursor finds the entry and answers with the rest of the text, without a request to the server.
 */

export interface CacheEntry {
  uri: string;
  /** Offset (UTF-16 code units, as VS Code counts) where the completion starts. */
  offset: number;
  /** The document text just before `offset`, to tell a reused offset from an edited document. */
  before: string;
  text: string;
}

/** Reads document text between two offsets. */
export type TextReader = (start: number, end: number) => string;

export const CONTEXT_CHARS = 128;

export class CompletionCache {
  private readonly entries = new Map<string, CacheEntry>();

  constructor(private readonly capacity = 64) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`cache capacity must be a positive integer, got ${capacity}`);
    }
  }

  get size(): number {
    return this.entries.size;
  }

  /** Remember `text` as the completion at `offset`; `read` reads the document. */
  put(uri: string, offset: number, text: string, read: TextReader): void {
    if (text === '') {
      return;
    }
    const before = read(Math.max(0, offset - CONTEXT_CHARS), offset);
    const key = `${uri}\u0000${offset}\u0000${before}`;
    this.entries.delete(key);
    this.entries.set(key, { uri, offset, before, text });
    while (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) {
        break;
      }
      this.entries.delete(oldest);
    }
  }

  /**
   * The rest of a cached completion at `offset`: an entry that starts at or before the cursor, whose
   * context is unchanged, and whose text begins with what was typed since. The most recently used
   * match wins; a hit becomes the most recently used.
   */
  lookup(uri: string, offset: number, read: TextReader): string | undefined {
    const found = this.find(uri, offset, read);
    if (!found) {
      return undefined;
    }
    const [key, entry] = found;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry.text.slice(offset - entry.offset);
  }

  /** Whether {@link lookup} would answer at `offset` (without making the entry the most recently used). */
  covers(uri: string, offset: number, read: TextReader): boolean {
    return this.find(uri, offset, read) !== undefined;
  }

  private find(uri: string, offset: number, read: TextReader): [string, CacheEntry] | undefined {
    const keys = [...this.entries.keys()].reverse();
    for (const key of keys) {
      const entry = this.entries.get(key);
      if (!entry || entry.uri !== uri || entry.offset > offset) {
        continue;
      }
      const typedLength = offset - entry.offset;
      if (typedLength >= entry.text.length) {
        continue;
      }
      const typed = read(entry.offset, offset);
      if (!entry.text.startsWith(typed)) {
        continue;
      }
      if (read(Math.max(0, entry.offset - CONTEXT_CHARS), entry.offset) !== entry.before) {
        continue;
      }
      return [key, entry];
    }
    return undefined;
  }

  /** Forget a document's entries (closed, or edited away from every entry). */
  clearDocument(uri: string): void {
    for (const [key, entry] of this.entries) {
      if (entry.uri === uri) {
        this.entries.delete(key);
      }
    }
  }
}
