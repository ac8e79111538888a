/**
 * The CodeCue extensions to LSP, as the server defines them (see editor_clients/README.md).
 * No `vscode` import here, so the logic that uses these types is testable in plain Node.
 */

/** Server -> client notification `codecue/partialCompletion`, sent while a completion generates. */
export const PARTIAL_COMPLETION = 'codecue/partialCompletion';
/** Client -> server request `codecue/stats`. */
export const STATS = 'codecue/stats';
/** Client -> server notification `codecue/cursorMoved`: the cursor came to rest there (warm the caches). */
export const CURSOR_MOVED = 'codecue/cursorMoved';
/** Client -> server: the user accepted a suggestion (all of it, a line or a word) and how many characters. */
export const ACCEPTED = 'codecue/accepted';

export interface CursorMovedParams {
  textDocument: { uri: string };
  /** LSP coordinates: `character` in UTF-16 code units. */
  position: { line: number; character: number };
}

export interface PartialCompletionParams {
  uri: string;
  /** Document version the server generated for. */
  version: number;
  /** Where the completion starts (the cursor at request time), LSP coordinates. */
  position: { line: number; character: number };
  /** The full text so far (not a delta). */
  text: string;
  /** True on the last notification of the generation. */
  done: boolean;
  /** JSON-RPC id of the textDocument/inlineCompletion request it belongs to. */
  requestId: number | string;
}

export interface LanguageStats {
  completions: number;
  acceptanceRate: number;
  ttftMs: number;
  tpotMs: number;
  tokensPerSecond: number;
  speculation: boolean;
}

export interface StatsResult {
  languages: Record<string, LanguageStats>;
  total: LanguageStats;
}

/** Is `value` a well-formed partialCompletion notification? (Bad input is dropped, never thrown on.) */
export function isPartialCompletionParams(value: unknown): value is PartialCompletionParams {
  if (typeof value !== 'object' || value === null) {
    return false;
  }
  const v = value as Record<string, unknown>;
  const position = v.position as Record<string, unknown> | undefined;
  return (
    typeof v.uri === 'string' &&
    typeof v.text === 'string' &&
    typeof v.done === 'boolean' &&
    (typeof v.requestId === 'number' || typeof v.requestId === 'string') &&
    typeof position === 'object' &&
    position !== null &&
    typeof position.line === 'number' &&
    typeof position.character === 'number'
  );
}
