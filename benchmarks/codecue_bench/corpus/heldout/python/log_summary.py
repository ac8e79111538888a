"""Summarise web-server access logs: requests per status, slowest paths, busiest clients.

Usage:
    python log_summary.py access.log --top 5 --min-status 400
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Common Log Format plus a trailing response time in milliseconds.
LINE_PATTERN = re.compile(
    r'(?P<client>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] '
    r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" '
    r"(?P<status>\d{3}) (?P<size>\d+|-) (?P<millis>\d+)"
)


@dataclass(frozen=True)
class Request:
    client: str
    method: str
    path: str
    status: int
    size: int
    millis: int


@dataclass
class Summary:
    total: int = 0
    skipped: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    by_client: Counter[str] = field(default_factory=Counter)
    durations: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))

    def add(self, request: Request) -> None:
        self.total += 1
        self.by_status[request.status] += 1
        self.by_client[request.client] += 1
        self.durations[request.path].append(request.millis)

    def slowest_paths(self, limit: int) -> list[tuple[str, float]]:
        """Paths ordered by mean response time, slowest first."""
        means = [(path, sum(times) / len(times)) for path, times in self.durations.items()]
        means.sort(key=lambda item: item[1], reverse=True)
        return means[:limit]


def parse_line(line: str) -> Request | None:
    match = LINE_PATTERN.match(line)
    if match is None:
        return None
    size = match["size"]
    return Request(
        client=match["client"],
        method=match["method"],
        path=match["path"].split("?", 1)[0],  # query strings would split one endpoint into many
        status=int(match["status"]),
        size=0 if size == "-" else int(size),
        millis=int(match["millis"]),
    )


def read_requests(lines: Iterable[str], summary: Summary) -> Iterator[Request]:
    for line in lines:
        request = parse_line(line.rstrip("\n"))
        if request is None:
            summary.skipped += 1
            continue
        yield request


def summarise(lines: Iterable[str], min_status: int = 0) -> Summary:
    summary = Summary()
    for request in read_requests(lines, summary):
        if request.status >= min_status:
            summary.add(request)
    return summary


def format_report(summary: Summary, top: int) -> str:
    out: list[str] = [f"requests: {summary.total} (skipped {summary.skipped} malformed lines)"]
    out.append("by status:")
    for status, count in sorted(summary.by_status.items()):
        share = 100.0 * count / summary.total if summary.total else 0.0
        out.append(f"  {status}  {count:>8}  {share:5.1f}%")
    out.append(f"top {top} clients:")
    for client, count in summary.by_client.most_common(top):
        out.append(f"  {client:<20} {count}")
    out.append(f"slowest {top} paths (mean ms):")
    for path, mean in summary.slowest_paths(top):
        out.append(f"  {mean:8.1f}  {path}")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Summarise an access log.")
    parser.add_argument("logfile", type=Path, nargs="?", help="log file (default: standard input)")
    parser.add_argument("--top", type=int, default=10, help="rows per table (default: 10)")
    parser.add_argument("--min-status", type=int, default=0, help="ignore responses below this status")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.top <= 0:
        print("error: --top must be positive", file=sys.stderr)
        return 2
    try:
        if args.logfile is None:
            summary = summarise(sys.stdin, args.min_status)
        else:
            with args.logfile.open(encoding="utf-8", errors="replace") as handle:
                summary = summarise(handle, args.min_status)
    except OSError as exc:
        print(f"error: cannot read {args.logfile}: {exc.strerror}", file=sys.stderr)
        return 1
    print(format_report(summary, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
