// A tiny event emitter and a debounced search box built on it.

import { EventEmitter } from "./emitter.js";

/**
 * Returns a function that calls `fn` once `wait` milliseconds have passed
 * without another call.
 */
export function debounce(fn, wait = 200) {
  let timer = null;
  return function (...args) {
    if (timer !== null) {
      clearTimeout(timer);
    }
    timer = setTimeout(() => {
      timer = null;
      fn.apply(this, args);
    }, wait);
  };
}

export class Store extends EventEmitter {
  constructor(initial = {}) {
    super();
    this.state = { ...initial };
  }

  get(key) {
    return this.state[key];
  }

  set(key, value) {
    const previous = this.state[key];
    if (previous === value) {
      return;
    }
    this.state = { ...this.state, [key]: value };
    this.emit("change", { key, value, previous });
  }
}

export function createSearch(input, results, search) {
  const store = new Store({ query: "", items: [] });
  const run = debounce(async (query) => {
    const items = await search(query);
    store.set("items", items);
  }, 250);

  input.addEventListener("input", (event) => {
    const query = event.target.value.trim();
    store.set("query", query);
    if (query.length >= 2) {
      run(query);
    }
  });

  store.on("change", ({ key, value }) => {
    if (key !== "items") return;
    results.innerHTML = "";
    for (const item of value) {
      const li = document.createElement("li");
      li.textContent = `${item.title} (${item.year})`;
      results.appendChild(li);
    }
  });
  return store;
}
