// A minimal observable store for a shopping cart, with a reducer, typed actions and selectors.

export interface Product {
  sku: string;
  name: string;
  priceCents: number;
}

export interface CartLine {
  product: Product;
  quantity: number;
}

export interface CartState {
  lines: Record<string, CartLine>;
  couponCode: string | null;
  discountPercent: number;
}

export type CartAction =
  | { type: "add"; product: Product; quantity?: number }
  | { type: "remove"; sku: string }
  | { type: "setQuantity"; sku: string; quantity: number }
  | { type: "applyCoupon"; code: string; percent: number }
  | { type: "clear" };

export const initialCart: CartState = { lines: {}, couponCode: null, discountPercent: 0 };

export function cartReducer(state: CartState, action: CartAction): CartState {
  switch (action.type) {
    case "add": {
      const existing = state.lines[action.product.sku];
      const quantity = (existing?.quantity ?? 0) + (action.quantity ?? 1);
      return { ...state, lines: { ...state.lines, [action.product.sku]: { product: action.product, quantity } } };
    }
    case "remove": {
      const { [action.sku]: _removed, ...rest } = state.lines;
      return { ...state, lines: rest };
    }
    case "setQuantity": {
      const line = state.lines[action.sku];
      if (!line) return state;
      if (action.quantity <= 0) return cartReducer(state, { type: "remove", sku: action.sku });
      return { ...state, lines: { ...state.lines, [action.sku]: { ...line, quantity: action.quantity } } };
    }
    case "applyCoupon":
      if (action.percent < 0 || action.percent > 100) {
        throw new RangeError(`coupon ${action.code} has invalid percent ${action.percent}`);
      }
      return { ...state, couponCode: action.code, discountPercent: action.percent };
    case "clear":
      return initialCart;
    default: {
      const unreachable: never = action;
      throw new Error(`unknown action ${JSON.stringify(unreachable)}`);
    }
  }
}

type Listener<S> = (state: S, previous: S) => void;

export class Store<S, A> {
  private state: S;
  private readonly listeners = new Set<Listener<S>>();

  constructor(
    private readonly reducer: (state: S, action: A) => S,
    initial: S,
  ) {
    this.state = initial;
  }

  getState(): S {
    return this.state;
  }

  dispatch(action: A): void {
    const previous = this.state;
    this.state = this.reducer(previous, action);
    if (this.state !== previous) {
      this.listeners.forEach((listener) => listener(this.state, previous));
    }
  }

  subscribe(listener: Listener<S>): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

export const selectItemCount = (state: CartState): number =>
  Object.values(state.lines).reduce((sum, line) => sum + line.quantity, 0);

export function selectTotals(state: CartState): { subtotal: number; discount: number; total: number } {
  const subtotal = Object.values(state.lines).reduce((sum, line) => sum + line.product.priceCents * line.quantity, 0);
  const discount = Math.round((subtotal * state.discountPercent) / 100);
  return { subtotal, discount, total: subtotal - discount };
}

export function formatCents(cents: number, currency = "EUR", locale = "fr-FR"): string {
  return new Intl.NumberFormat(locale, { style: "currency", currency }).format(cents / 100);
}

const store = new Store(cartReducer, initialCart);
const unsubscribe = store.subscribe((state) => {
  const { total } = selectTotals(state);
  console.log(`${selectItemCount(state)} items, total ${formatCents(total)}`);
});

store.dispatch({ type: "add", product: { sku: "TEA-01", name: "Green tea", priceCents: 450 }, quantity: 2 });
store.dispatch({ type: "add", product: { sku: "MUG-02", name: "Mug", priceCents: 1200 } });
store.dispatch({ type: "applyCoupon", code: "WELCOME10", percent: 10 });
store.dispatch({ type: "setQuantity", sku: "TEA-01", quantity: 0 });
unsubscribe();
