/**
 * Merging `codecue/partialCompletion` notifications into one growing text per generation.
 *
 * Each notification carries the full text so far, so merging is "keep the latest text of the newest
 * generation": a notification for an older generation of the same document (a superseded request) is
 * dropped, as is anything after that generation's `done`, and a text that does not extend the one
 * already held replaces it only if it is longer (a reordered, shorter one is stale).
 */
import { PartialCompletionParams } from './protocol';

export interface StreamState {
  uri: string;
  version: number;
  line: number;
  character: number;
  requestId: number | string;
  text: string;
  done: boolean;
}

export type MergeOutcome = 'new' | 'grew' | 'done' | 'ignored';

export class PartialStore {
  private readonly byUri = new Map<string, StreamState>();
  /** Generations (request ids) of each document in the order they were first seen. */
  private readonly retired = new Map<string, Set<number | string>>();

  /** Merge one notification; says what changed. */
  merge(params: PartialCompletionParams): MergeOutcome {
    const retired = this.retired.get(params.uri);
    if (retired?.has(params.requestId)) {
      return 'ignored';
    }
    const current = this.byUri.get(params.uri);
    if (current && current.requestId !== params.requestId) {
      if (typeof current.requestId === 'number' && typeof params.requestId === 'number' && params.requestId < current.requestId) {
        return 'ignored';
      }
      this.retire(params.uri, current.requestId);
    } else if (current) {
      if (current.done) {
        return 'ignored';
      }
      if (!params.text.startsWith(current.text) && params.text.length <= current.text.length) {
        return 'ignored';
      }
      if (params.text === current.text && !params.done) {
        return 'ignored';
      }
    }
    this.byUri.set(params.uri, {
      uri: params.uri,
      version: params.version,
      line: params.position.line,
      character: params.position.character,
      requestId: params.requestId,
      text: params.text,
      done: params.done,
    });
    if (params.done) {
      return 'done';
    }
    return current && current.requestId === params.requestId ? 'grew' : 'new';
  }

  /** The stream for this exact document state and position, if any. */
  lookup(uri: string, version: number, line: number, character: number): StreamState | undefined {
    const state = this.byUri.get(uri);
    if (!state || state.version !== version || state.line !== line || state.character !== character) {
      return undefined;
    }
    return state;
  }

  /** The latest stream of a document whatever its position (for type-through checks). */
  latest(uri: string): StreamState | undefined {
    return this.byUri.get(uri);
  }

  /** Forget a document's stream (the generation was cancelled or the document closed). */
  clear(uri: string): void {
    const state = this.byUri.get(uri);
    if (state) {
      this.retire(uri, state.requestId);
      this.byUri.delete(uri);
    }
  }

  private retire(uri: string, requestId: number | string): void {
    let set = this.retired.get(uri);
    if (!set) {
      set = new Set();
      this.retired.set(uri, set);
    }
    set.add(requestId);
    // Keep the bookkeeping small: ids are only ever compared with recent ones.
    if (set.size > 256) {
      const oldest = set.values().next().value;
      if (oldest !== undefined) {
        set.delete(oldest);
      }
    }
  }
}
