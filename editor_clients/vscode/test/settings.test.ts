import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS, documentSelector, initializationOptions, needsRestart, readSettings } from '../src/settings';

const reader = (values: Record<string, unknown>) => (key: string) => values[key];

describe('readSettings', () => {
  it('gives the defaults when nothing is set', () => {
    const { settings, problems } = readSettings(reader({}));
    expect(settings).toEqual(DEFAULT_SETTINGS);
    expect(problems).toEqual([]);
  });

  it('takes valid values', () => {
    const { settings, problems } = readSettings(
      reader({
        serverPath: ' /opt/codecue/bin/codecue ',
        serverArgs: ['serve', '--stdio', '--in-process'],
        'model.target': 'qwen2.5-coder-1.5b',
        'model.draft': '/models/draft.gguf',
        maxTokens: 48,
        temperature: 0.2,
        languages: ['python', 'go', 'python'],
        debounceMs: 0,
        enabled: false,
        'cursorMoved.enabled': false,
        'cursorMoved.debounceMs': 400,
      }),
    );
    expect(problems).toEqual([]);
    expect(settings.serverPath).toBe('/opt/codecue/bin/codecue');
    expect(settings.serverArgs).toEqual(['serve', '--stdio', '--in-process']);
    expect(settings.model).toEqual({ target: 'qwen2.5-coder-1.5b', draft: '/models/draft.gguf' });
    expect(settings.maxTokens).toBe(48);
    expect(settings.temperature).toBe(0.2);
    expect(settings.languages).toEqual(['python', 'go']);
    expect(settings.debounceMs).toBe(0);
    expect(settings.enabled).toBe(false);
    expect(settings.cursorMoved).toEqual({ enabled: false, debounceMs: 400 });
  });

  it.each([
    ['serverPath', ''],
    ['serverArgs', 'serve --stdio'],
    ['maxTokens', 0],
    ['maxTokens', 2.5],
    ['temperature', -1],
    ['languages', 'python'],
    ['debounceMs', -5],
    ['enabled', 'yes'],
    ['cursorMoved.enabled', 1],
    ['cursorMoved.debounceMs', -1],
    ['cursorMoved.debounceMs', 6000],
  ])('reports %s = %j and keeps the default', (key, value) => {
    const { settings, problems } = readSettings(reader({ [key]: value }));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toContain(`codecue.${key}`);
    expect(settings).toEqual(DEFAULT_SETTINGS);
  });

  it('the defaults match the ones package.json declares', () => {
    const manifest = JSON.parse(readFileSync(join(__dirname, '..', 'package.json'), 'utf8'));
    const properties = manifest.contributes.configuration.properties as Record<string, { default: unknown }>;
    const declared = Object.fromEntries(Object.entries(properties).map(([k, v]) => [k.replace(/^codecue\./, ''), v.default]));
    const { settings } = readSettings(reader(declared));
    expect(settings).toEqual(DEFAULT_SETTINGS);
    expect(Object.keys(declared).sort()).toEqual(
      ['enabled', 'serverPath', 'serverArgs', 'model.target', 'model.draft', 'maxTokens', 'temperature', 'languages', 'debounceMs',
        'cursorMoved.enabled', 'cursorMoved.debounceMs', 'statsIntervalSeconds'].sort(),
    );
  });
});

describe('what settings become', () => {
  it('initializationOptions: camelCase, unset values left out', () => {
    expect(initializationOptions(DEFAULT_SETTINGS)).toEqual({
      languages: Object.fromEntries(DEFAULT_SETTINGS.languages.map((l) => [l, true])),
    });
    const { settings } = readSettings(reader({ maxTokens: 32, temperature: 0, 'model.target': 't', languages: ['python'] }));
    expect(initializationOptions(settings)).toEqual({ maxTokens: 32, temperature: 0, languages: { python: true }, model: { target: 't' } });
  });

  it('documentSelector covers files and untitled buffers of each language', () => {
    const { settings } = readSettings(reader({ languages: ['python', 'rust'] }));
    expect(documentSelector(settings)).toEqual([
      { language: 'python', scheme: 'file' },
      { language: 'python', scheme: 'untitled' },
      { language: 'rust', scheme: 'file' },
      { language: 'rust', scheme: 'untitled' },
    ]);
  });

  it('a restart is needed for server, model and generation options, not for the debounce', () => {
    const base = readSettings(reader({})).settings;
    expect(needsRestart(base, readSettings(reader({ debounceMs: 10 })).settings)).toBe(false);
    expect(needsRestart(base, readSettings(reader({ 'cursorMoved.debounceMs': 300 })).settings)).toBe(false);
    expect(needsRestart(base, readSettings(reader({ 'model.draft': 'd' })).settings)).toBe(true);
    expect(needsRestart(base, readSettings(reader({ serverPath: '/x/codecue' })).settings)).toBe(true);
    expect(needsRestart(base, readSettings(reader({ maxTokens: 8 })).settings)).toBe(true);
  });
});
