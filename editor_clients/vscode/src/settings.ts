/**
 * The extension's settings (`codecue.*`): read once per change, validated, a bad value reported and its
 * default used. Also what they become: the server command and its initializationOptions.
 */

export interface Settings {
  enabled: boolean;
  serverPath: string;
  serverArgs: string[];
  model: { target: string; draft: string };
  maxTokens: number | null;
  temperature: number | null;
  languages: string[];
  debounceMs: number;
  /** `codecue/cursorMoved` once the cursor has rested `debounceMs` (warms the server's caches there). */
  cursorMoved: { enabled: boolean; debounceMs: number };
  statsIntervalSeconds: number;
}

export const DEFAULT_SETTINGS: Settings = {
  enabled: true,
  serverPath: 'codecue',
  serverArgs: ['serve', '--stdio'],
  model: { target: '', draft: '' },
  maxTokens: null,
  temperature: null,
  languages: [
    'python',
    'javascript',
    'javascriptreact',
    'typescript',
    'typescriptreact',
    'go',
    'rust',
    'java',
    'c',
    'cpp',
    'lua',
    'shellscript',
  ],
  debounceMs: 75,
  cursorMoved: { enabled: true, debounceMs: 150 },
  statsIntervalSeconds: 30,
};

/** Reads one setting by its key under `codecue.` (e.g. `model.target`); undefined when unset. */
export type SettingReader = (key: string) => unknown;

const isStringArray = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === 'string');

/** Read and validate every setting. */
export function readSettings(read: SettingReader): { settings: Settings; problems: string[] } {
  const problems: string[] = [];
  const settings: Settings = structuredClone(DEFAULT_SETTINGS);

  function take<T>(key: string, valid: (v: unknown) => v is T, expected: string, assign: (v: T) => void): void {
    const value = read(key);
    if (value === undefined) {
      return;
    }
    if (valid(value)) {
      assign(value);
    } else {
      problems.push(`codecue.${key} must be ${expected}; using the default`);
    }
  }

  take('enabled', (v): v is boolean => typeof v === 'boolean', 'true or false', (v) => (settings.enabled = v));
  take(
    'serverPath',
    (v): v is string => typeof v === 'string' && v.trim() !== '',
    'a non-empty path or command name',
    (v) => (settings.serverPath = v.trim()),
  );
  take('serverArgs', isStringArray, 'a list of strings', (v) => (settings.serverArgs = v));
  take('model.target', (v): v is string => typeof v === 'string', 'a model path or name', (v) => (settings.model.target = v.trim()));
  take('model.draft', (v): v is string => typeof v === 'string', 'a model path or name', (v) => (settings.model.draft = v.trim()));
  take(
    'maxTokens',
    (v): v is number | null => v === null || (typeof v === 'number' && Number.isInteger(v) && v >= 1),
    'a whole number >= 1 (or null for the server default)',
    (v) => (settings.maxTokens = v),
  );
  take(
    'temperature',
    (v): v is number | null => v === null || (typeof v === 'number' && v >= 0 && Number.isFinite(v)),
    'a number >= 0 (or null for the server default)',
    (v) => (settings.temperature = v),
  );
  take('languages', isStringArray, 'a list of language ids', (v) => (settings.languages = [...new Set(v)]));
  take(
    'debounceMs',
    (v): v is number => typeof v === 'number' && v >= 0 && v <= 5000,
    'a number of milliseconds from 0 to 5000',
    (v) => (settings.debounceMs = v),
  );
  take(
    'cursorMoved.enabled',
    (v): v is boolean => typeof v === 'boolean',
    'true or false',
    (v) => (settings.cursorMoved.enabled = v),
  );
  take(
    'cursorMoved.debounceMs',
    (v): v is number => typeof v === 'number' && v >= 0 && v <= 5000,
    'a number of milliseconds from 0 to 5000',
    (v) => (settings.cursorMoved.debounceMs = v),
  );
  take(
    'statsIntervalSeconds',
    (v): v is number => typeof v === 'number' && v >= 0,
    'a number of seconds >= 0 (0 turns polling off)',
    (v) => (settings.statsIntervalSeconds = v),
  );
  return { settings, problems };
}

/** initializationOptions for the server (camelCase, unset values left out). */
export function initializationOptions(settings: Settings): Record<string, unknown> {
  const options: Record<string, unknown> = {};
  if (settings.maxTokens !== null) {
    options.maxTokens = settings.maxTokens;
  }
  if (settings.temperature !== null) {
    options.temperature = settings.temperature;
  }
  options.languages = Object.fromEntries(settings.languages.map((language) => [language, true]));
  const model: Record<string, string> = {};
  if (settings.model.target) {
    model.target = settings.model.target;
  }
  if (settings.model.draft) {
    model.draft = settings.model.draft;
  }
  if (Object.keys(model).length > 0) {
    options.model = model;
  }
  return options;
}

/** Document selector entries for the enabled languages (files and unsaved buffers). */
export function documentSelector(settings: Settings): { language: string; scheme: string }[] {
  return settings.languages.flatMap((language) => [
    { language, scheme: 'file' },
    { language, scheme: 'untitled' },
  ]);
}

/** Do two settings need a server restart to take effect? */
export function needsRestart(a: Settings, b: Settings): boolean {
  return (
    a.serverPath !== b.serverPath ||
    JSON.stringify(a.serverArgs) !== JSON.stringify(b.serverArgs) ||
    JSON.stringify(initializationOptions(a)) !== JSON.stringify(initializationOptions(b))
  );
}
