/**
 * Load application settings from a JSON file plus environment overrides,
 * validating every field once so the rest of the program can trust the types.
 */
import { readFile } from "node:fs/promises";

export type LogLevel = "debug" | "info" | "warn" | "error";

export interface DatabaseSettings {
  host: string;
  port: number;
  name: string;
  poolSize: number;
}

export interface Settings {
  listen: { host: string; port: number };
  logLevel: LogLevel;
  database: DatabaseSettings;
  featureFlags: Record<string, boolean>;
}

export class SettingsError extends Error {
  constructor(
    public readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
    this.name = "SettingsError";
  }
}

const DEFAULTS: Settings = {
  listen: { host: "127.0.0.1", port: 3000 },
  logLevel: "info",
  database: { host: "localhost", port: 5432, name: "app", poolSize: 10 },
  featureFlags: {},
};

type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

function isObject(value: unknown): value is Record<string, Json> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function readString(raw: Record<string, Json>, key: string, path: string, fallback: string): string {
  const value = raw[key];
  if (value === undefined) return fallback;
  if (typeof value !== "string" || value.length === 0) {
    throw new SettingsError(`${path}.${key}`, "expected a non-empty string");
  }
  return value;
}

function readInt(raw: Record<string, Json>, key: string, path: string, fallback: number, min = 0, max = 65535): number {
  const value = raw[key];
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new SettingsError(`${path}.${key}`, `expected an integer in [${min}, ${max}], got ${JSON.stringify(value)}`);
  }
  return value;
}

function section(raw: Record<string, Json>, key: string): Record<string, Json> {
  const value = raw[key] ?? {};
  if (!isObject(value)) throw new SettingsError(key, "expected an object");
  return value;
}

export function parseSettings(raw: unknown): Settings {
  if (!isObject(raw)) throw new SettingsError("$", "settings file must contain a JSON object");
  const listen = section(raw, "listen");
  const db = section(raw, "database");
  const flags = section(raw, "featureFlags");

  const logLevel = readString(raw, "logLevel", "$", DEFAULTS.logLevel);
  if (!["debug", "info", "warn", "error"].includes(logLevel)) {
    throw new SettingsError("$.logLevel", `unknown level "${logLevel}"`);
  }
  for (const [name, enabled] of Object.entries(flags)) {
    if (typeof enabled !== "boolean") throw new SettingsError(`featureFlags.${name}`, "expected true or false");
  }

  return {
    listen: {
      host: readString(listen, "host", "listen", DEFAULTS.listen.host),
      port: readInt(listen, "port", "listen", DEFAULTS.listen.port, 1),
    },
    logLevel: logLevel as LogLevel,
    database: {
      host: readString(db, "host", "database", DEFAULTS.database.host),
      port: readInt(db, "port", "database", DEFAULTS.database.port, 1),
      name: readString(db, "name", "database", DEFAULTS.database.name),
      poolSize: readInt(db, "poolSize", "database", DEFAULTS.database.poolSize, 1, 200),
    },
    featureFlags: flags as Record<string, boolean>,
  };
}

/** APP_DATABASE__HOST=db overrides database.host; values are parsed as JSON when they look like it. */
export function applyEnvOverrides(raw: Record<string, Json>, env: NodeJS.ProcessEnv, prefix = "APP_"): void {
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith(prefix) || value === undefined) continue;
    const keys = name.slice(prefix.length).toLowerCase().split("__");
    let target = raw;
    for (const key of keys.slice(0, -1)) {
      if (!isObject(target[key])) target[key] = {};
      target = target[key] as Record<string, Json>;
    }
    const leaf = keys[keys.length - 1].replace(/_(\w)/g, (_, c: string) => c.toUpperCase());
    target[leaf] = /^(\d+|true|false)$/.test(value) ? (JSON.parse(value) as Json) : value;
  }
}

export async function loadSettings(file: string, env: NodeJS.ProcessEnv = process.env): Promise<Settings> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    throw new SettingsError(file, `cannot read: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new SettingsError(file, `invalid JSON: ${(err as Error).message}`);
  }
  if (isObject(raw)) applyEnvOverrides(raw, env);
  return parseSettings(raw);
}
