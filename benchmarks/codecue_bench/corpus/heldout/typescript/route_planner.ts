// Shortest routes over a weighted road network with a binary-heap priority queue.

export interface Edge {
  to: string;
  distanceKm: number;
  toll?: boolean;
}

export interface Route {
  path: string[];
  distanceKm: number;
}

export class MinHeap<T> {
  private items: T[] = [];

  constructor(private readonly compare: (a: T, b: T) => number) {}

  get size(): number {
    return this.items.length;
  }

  push(item: T): void {
    this.items.push(item);
    let i = this.items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (this.compare(this.items[i], this.items[parent]) >= 0) break;
      [this.items[i], this.items[parent]] = [this.items[parent], this.items[i]];
      i = parent;
    }
  }

  pop(): T | undefined {
    if (this.items.length === 0) return undefined;
    const top = this.items[0];
    const last = this.items.pop() as T;
    if (this.items.length > 0) {
      this.items[0] = last;
      this.siftDown(0);
    }
    return top;
  }

  private siftDown(start: number): void {
    let i = start;
    const n = this.items.length;
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let smallest = i;
      if (left < n && this.compare(this.items[left], this.items[smallest]) < 0) smallest = left;
      if (right < n && this.compare(this.items[right], this.items[smallest]) < 0) smallest = right;
      if (smallest === i) return;
      [this.items[i], this.items[smallest]] = [this.items[smallest], this.items[i]];
      i = smallest;
    }
  }
}

export class RoadNetwork {
  private readonly adjacency = new Map<string, Edge[]>();

  addRoad(from: string, to: string, distanceKm: number, options: { toll?: boolean; oneWay?: boolean } = {}): this {
    if (distanceKm < 0) {
      throw new RangeError(`road ${from} -> ${to} has negative length ${distanceKm}`);
    }
    this.edgesFrom(from).push({ to, distanceKm, toll: options.toll });
    if (!options.oneWay) {
      this.edgesFrom(to).push({ to: from, distanceKm, toll: options.toll });
    }
    return this;
  }

  private edgesFrom(city: string): Edge[] {
    let edges = this.adjacency.get(city);
    if (edges === undefined) {
      edges = [];
      this.adjacency.set(city, edges);
    }
    return edges;
  }

  /** Dijkstra from `start` to `goal`; returns null when the goal cannot be reached. */
  shortestRoute(start: string, goal: string, avoidTolls = false): Route | null {
    if (!this.adjacency.has(start) || !this.adjacency.has(goal)) return null;
    const best = new Map<string, number>([[start, 0]]);
    const previous = new Map<string, string>();
    const queue = new MinHeap<[string, number]>((a, b) => a[1] - b[1]);
    queue.push([start, 0]);

    while (queue.size > 0) {
      const [city, distance] = queue.pop()!;
      if (city === goal) break;
      // Stale entries are skipped instead of decreasing keys in place.
      if (distance > (best.get(city) ?? Infinity)) continue;
      for (const edge of this.adjacency.get(city) ?? []) {
        if (avoidTolls && edge.toll) continue;
        const candidate = distance + edge.distanceKm;
        if (candidate < (best.get(edge.to) ?? Infinity)) {
          best.set(edge.to, candidate);
          previous.set(edge.to, city);
          queue.push([edge.to, candidate]);
        }
      }
    }

    const total = best.get(goal);
    if (total === undefined) return null;
    const path = [goal];
    for (let city = goal; city !== start; ) {
      city = previous.get(city)!;
      path.unshift(city);
    }
    return { path, distanceKm: total };
  }
}

export function formatRoute(route: Route | null): string {
  if (route === null) return "no route";
  return `${route.path.join(" -> ")} (${route.distanceKm.toFixed(1)} km)`;
}

const network = new RoadNetwork()
  .addRoad("Lyon", "Paris", 465, { toll: true })
  .addRoad("Lyon", "Dijon", 195)
  .addRoad("Dijon", "Paris", 315)
  .addRoad("Lyon", "Geneva", 150);

console.log(formatRoute(network.shortestRoute("Geneva", "Paris")));
console.log(formatRoute(network.shortestRoute("Geneva", "Paris", true)));
