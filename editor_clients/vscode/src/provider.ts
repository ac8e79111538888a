/**
 * Inline completions through the language client's `textDocument/inlineCompletion` feature, with what
 * makes them feel live: the `codecue/partialCompletion` stream shown as it grows (each notification
 * re-triggers the inline suggestion, and this provider answers the re-query with the text so far), a
 * cache that answers type-through without the server, a debounce, and cancellation of a generation as
 * soon as typing makes it stale.
 *
 * VS Code cancels a provider call whenever it queries again; the request to the server therefore runs
 * under this controller's own cancellation token, so re-triggering for the stream never stops the
 * generation it is showing.
 */
import * as vscode from 'vscode';
import { CompletionCache, TextReader } from './cache';
import { CursorPlace, samePlace } from './cursor';
import { Debouncer } from './debounce';
import { PartialStore } from './partials';
import { isPartialCompletionParams } from './protocol';

export type Next = (
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  token: vscode.CancellationToken,
) => vscode.ProviderResult<vscode.InlineCompletionItem[] | vscode.InlineCompletionList>;

interface Inflight {
  uri: string;
  version: number;
  offset: number;
  line: number;
  character: number;
  source: vscode.CancellationTokenSource;
}

export interface ControllerOptions {
  /** Ask the editor to query inline suggestions again (editor.action.inlineSuggest.trigger). */
  trigger: () => void;
  debounceMs: number;
  /** Called after each final answer (e.g. to refresh the stats). */
  onAnswer?: () => void;
  log?: (message: string) => void;
}

/** Reads a document's text between two offsets. */
export function readerFor(document: vscode.TextDocument): TextReader {
  return (start, end) => document.getText(new vscode.Range(document.positionAt(start), document.positionAt(end)));
}

function itemText(item: vscode.InlineCompletionItem): string {
  const text = item.insertText as string | vscode.SnippetString;
  return typeof text === 'string' ? text : text.value;
}

export class InlineCompletionController {
  readonly cache = new CompletionCache(64);
  readonly partials = new PartialStore();
  readonly debouncer: Debouncer;
  enabled = true;
  private inflight: Inflight | undefined;
  /** Where a completion was last asked for (the server knows that place). */
  private lastAsked: CursorPlace | undefined;

  constructor(private readonly options: ControllerOptions) {
    this.debouncer = new Debouncer(options.debounceMs);
  }

  /** Middleware for the language client's inline completion feature. */
  async provide(
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
    next: Next,
  ): Promise<vscode.InlineCompletionItem[] | null> {
    if (!this.enabled) {
      return null;
    }
    const uri = document.uri.toString();
    this.lastAsked = { uri, version: document.version, line: position.line, character: position.character };
    const offset = document.offsetAt(position);
    const read = readerFor(document);

    // 1. A finished answer, at this position or earlier with the user typing through it.
    const cached = this.cache.lookup(uri, offset, read);
    if (cached !== undefined) {
      return [acceptable(cached, uri, position)];
    }

    // 2. A generation running for this document: show its text so far, minus what was typed since.
    const inflight = this.inflight;
    if (inflight && inflight.uri === uri && offset >= inflight.offset) {
      const stream = this.partials.latest(uri);
      const streamed =
        stream && stream.line === inflight.line && stream.character === inflight.character ? stream.text : '';
      const typed = read(inflight.offset, offset);
      if (inflight.version === document.version && offset === inflight.offset) {
        return streamed ? [acceptable(streamed, uri, position)] : null;
      }
      if (typed.length < streamed.length && streamed.startsWith(typed)) {
        return [acceptable(streamed.slice(typed.length), uri, position)];
      }
    }

    // 3. A new request; whatever ran before is stale now.
    this.cancelInflight();
    if (!(await this.debouncer.wait(token))) {
      return null;
    }
    const source = new vscode.CancellationTokenSource();
    const mine: Inflight = {
      uri,
      version: document.version,
      offset,
      line: position.line,
      character: position.character,
      source,
    };
    this.inflight = mine;
    let result: vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined;
    try {
      result = await next(document, position, context, source.token);
    } catch (error) {
      if (!source.token.isCancellationRequested) {
        this.options.log?.(`inline completion failed: ${String(error)}`);
      }
      return null;
    } finally {
      if (this.inflight === mine) {
        this.inflight = undefined;
      }
      source.dispose();
    }
    if (source.token.isCancellationRequested || !result) {
      return null;
    }
    const items = Array.isArray(result) ? result : result.items;
    const texts = items.map(itemText).filter((text) => text !== '');
    if (texts.length === 0) {
      return null;
    }
    this.cache.put(uri, offset, texts[0], read);
    this.options.onAnswer?.();
    if (token.isCancellationRequested) {
      // The editor re-queried while this ran (the stream's re-triggers do that): ask once more, and the
      // cache answers with the final text.
      this.options.trigger();
      return null;
    }
    return texts.map((text) => acceptable(text, uri, position));
  }

  /** Handler of the `codecue/partialCompletion` notification. */
  onPartial(params: unknown): void {
    if (!this.enabled || !isPartialCompletionParams(params)) {
      return;
    }
    const outcome = this.partials.merge(params);
    const inflight = this.inflight;
    if (outcome === 'ignored' || !inflight || inflight.uri !== params.uri) {
      return;
    }
    if (inflight.line !== params.position.line || inflight.character !== params.position.character) {
      return;
    }
    this.options.trigger();
  }

  /**
   * Whether the server is busy at `place` or knows it already, so a `codecue/cursorMoved` for it would
   * be no use: a generation is running for the document, a suggestion (a cached one, typed through)
   * covers the cursor, or a completion was last asked for right there. `offset` is the place's.
   */
  knows(place: CursorPlace, offset: number, read: TextReader): boolean {
    return (
      this.inflight?.uri === place.uri || samePlace(place, this.lastAsked) || this.cache.covers(place.uri, offset, read)
    );
  }

  /** Stop the running generation, if any. */
  cancelInflight(): void {
    const inflight = this.inflight;
    this.inflight = undefined;
    this.debouncer.cancel();
    if (inflight) {
      inflight.source.cancel();
      this.partials.clear(inflight.uri);
    }
  }

  /** A document closed: forget it. */
  forget(uri: string): void {
    if (this.inflight?.uri === uri) {
      this.cancelInflight();
    }
    this.partials.clear(uri);
    this.cache.clearDocument(uri);
  }
}

/** The command VS Code runs when the user accepts a whole suggestion: it tells the server (`codecue/accepted`). */
export const ACCEPTED_COMMAND = 'codecue.accepted';

/** An item at the cursor whose acceptance (the whole of it) is reported to the server. */
export function acceptable(text: string, uri: string, position: vscode.Position): vscode.InlineCompletionItem {
  const item = new vscode.InlineCompletionItem(text, new vscode.Range(position, position));
  item.command = { command: ACCEPTED_COMMAND, title: 'accepted', arguments: [uri, 'whole', text.length] };
  return item;
}
