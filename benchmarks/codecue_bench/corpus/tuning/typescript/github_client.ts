/**
 * A small typed client for a REST API (GitHub-like), with pagination, rate-limit handling
 * and a Result type instead of thrown errors at the call sites.
 */

export type Result<T, E = ApiError> = { ok: true; value: T } | { ok: false; error: E };

export interface ApiError {
  status: number;
  message: string;
  retryAfterSeconds?: number;
}

export interface Issue {
  number: number;
  title: string;
  state: "open" | "closed";
  labels: { name: string }[];
  user: { login: string };
  created_at: string;
}

export interface ClientOptions {
  baseUrl?: string;
  token?: string;
  userAgent?: string;
  fetchImpl?: typeof fetch;
}

export class ApiClient {
  private readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;

  constructor({ baseUrl = "https://api.github.com", token, userAgent = "codecue-example", fetchImpl = fetch }: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.headers = { Accept: "application/vnd.github+json", "User-Agent": userAgent };
    if (token) this.headers.Authorization = `Bearer ${token}`;
    this.fetchImpl = fetchImpl;
  }

  private async request<T>(path: string, query: Record<string, string | number> = {}): Promise<Result<{ data: T; next: string | null }>> {
    const url = new URL(path.startsWith("http") ? path : `${this.baseUrl}${path}`);
    for (const [key, value] of Object.entries(query)) url.searchParams.set(key, String(value));

    let response: Response;
    try {
      response = await this.fetchImpl(url, { headers: this.headers });
    } catch (err) {
      return { ok: false, error: { status: 0, message: `network error: ${(err as Error).message}` } };
    }

    if (response.status === 403 || response.status === 429) {
      const reset = Number(response.headers.get("x-ratelimit-reset") ?? 0);
      const retryAfterSeconds = reset > 0 ? Math.max(0, reset - Math.floor(Date.now() / 1000)) : 60;
      return { ok: false, error: { status: response.status, message: "rate limited", retryAfterSeconds } };
    }
    if (!response.ok) {
      const body = (await response.json().catch(() => ({}))) as { message?: string };
      return { ok: false, error: { status: response.status, message: body.message ?? response.statusText } };
    }
    const data = (await response.json()) as T;
    return { ok: true, value: { data, next: parseNextLink(response.headers.get("link")) } };
  }

  /** All issues of a repository, following `Link: <...>; rel="next"` headers up to `maxPages`. */
  async listIssues(owner: string, repo: string, state: "open" | "closed" | "all" = "open", maxPages = 5): Promise<Result<Issue[]>> {
    const issues: Issue[] = [];
    let path: string | null = `/repos/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/issues`;
    let query: Record<string, string | number> = { state, per_page: 100 };
    for (let page = 0; path !== null && page < maxPages; page++) {
      const result: Result<{ data: Issue[]; next: string | null }> = await this.request<Issue[]>(path, query);
      if (!result.ok) return result;
      issues.push(...result.value.data);
      path = result.value.next;
      query = {}; // the next link already carries the query string
    }
    return { ok: true, value: issues };
  }
}

export function parseNextLink(header: string | null): string | null {
  if (!header) return null;
  for (const part of header.split(",")) {
    const match = /<([^>]+)>\s*;\s*rel="([^"]+)"/.exec(part.trim());
    if (match && match[2] === "next") return match[1];
  }
  return null;
}

export function groupByLabel(issues: Issue[]): Map<string, Issue[]> {
  const groups = new Map<string, Issue[]>();
  for (const issue of issues) {
    const labels = issue.labels.length > 0 ? issue.labels.map((label) => label.name) : ["(unlabelled)"];
    for (const label of labels) {
      const group = groups.get(label) ?? [];
      group.push(issue);
      groups.set(label, group);
    }
  }
  return groups;
}

export async function printIssueReport(client: ApiClient, owner: string, repo: string): Promise<number> {
  const result = await client.listIssues(owner, repo);
  if (!result.ok) {
    const hint = result.error.retryAfterSeconds ? ` (retry in ${result.error.retryAfterSeconds}s)` : "";
    console.error(`error ${result.error.status}: ${result.error.message}${hint}`);
    return 1;
  }
  const groups = [...groupByLabel(result.value)].sort((a, b) => b[1].length - a[1].length);
  for (const [label, group] of groups) {
    console.log(`${label.padEnd(24)} ${String(group.length).padStart(4)}`);
  }
  return 0;
}
