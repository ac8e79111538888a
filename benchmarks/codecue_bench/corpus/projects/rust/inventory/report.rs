//! Stock reports: what to reorder, what the stock is worth, and a printable summary.

use crate::item::{Item, Unit};
use crate::warehouse::{Movement, Warehouse};

pub struct ReorderLine {
    pub sku: String,
    pub on_hand: u32,
    pub reorder_level: u32,
}

pub fn needs_reorder(warehouse: &Warehouse) -> Vec<ReorderLine> {
    let mut lines: Vec<ReorderLine> = warehouse
        .items()
        .filter(|item| warehouse.quantity(&item.sku) <= item.reorder_level)
        .map(|item| ReorderLine {
            sku: item.sku.clone(),
            on_hand: warehouse.quantity(&item.sku),
            reorder_level: item.reorder_level,
        })
        .collect();
    lines.sort_by(|a, b| a.sku.cmp(&b.sku));
    lines
}

pub fn stock_value_cents(warehouse: &Warehouse) -> u64 {
    warehouse
        .items()
        .map(|item| item.unit_cost_cents * u64::from(warehouse.quantity(&item.sku)))
        .sum()
}

pub fn shipped_total(warehouse: &Warehouse, sku: &str) -> u32 {
    warehouse
        .movements()
        .iter()
        .filter_map(|m| match m {
            Movement::Shipped { sku: s, quantity } if s == sku => Some(*quantity),
            _ => None,
        })
        .sum()
}

fn describe(item: &Item, on_hand: u32) -> String {
    format!("{:<10} {:<24} {:>6} {}", item.sku, item.name, on_hand, item.unit.suffix())
}

pub fn summary(warehouse: &Warehouse) -> String {
    let mut items: Vec<&Item> = warehouse.items().collect();
    items.sort_by(|a, b| a.sku.cmp(&b.sku));
    let mut out = String::new();
    for item in items {
        out.push_str(&describe(item, warehouse.quantity(&item.sku)));
        out.push('\n');
    }
    let weight_kg: u32 = warehouse
        .items()
        .filter(|item| item.unit == Unit::Kilogram)
        .map(|item| warehouse.quantity(&item.sku))
        .sum();
    out.push_str(&format!("bulk goods: {weight_kg} kg\n"));
    out.push_str(&format!("stock value: {:.2}\n", stock_value_cents(warehouse) as f64 / 100.0));
    out
}
