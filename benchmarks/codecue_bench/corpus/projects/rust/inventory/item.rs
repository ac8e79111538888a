//! Stock items, their units and the errors stock operations return.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Piece,
    Kilogram,
    Litre,
}

impl Unit {
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Piece => "pcs",
            Unit::Kilogram => "kg",
            Unit::Litre => "l",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub sku: String,
    pub name: String,
    pub unit: Unit,
    pub unit_cost_cents: u64,
    pub reorder_level: u32,
}

impl Item {
    pub fn new(sku: &str, name: &str, unit: Unit, unit_cost_cents: u64) -> Self {
        Item { sku: sku.to_string(), name: name.to_string(), unit, unit_cost_cents, reorder_level: 0 }
    }

    pub fn with_reorder_level(mut self, level: u32) -> Self {
        self.reorder_level = level;
        self
    }
}

#[derive(Debug, PartialEq)]
pub enum StockError {
    UnknownSku(String),
    Insufficient { sku: String, wanted: u32, available: u32 },
    DuplicateSku(String),
}

impl fmt::Display for StockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StockError::UnknownSku(sku) => write!(f, "unknown sku {sku}"),
            StockError::Insufficient { sku, wanted, available } => {
                write!(f, "only {available} of {sku} in stock, {wanted} wanted")
            }
            StockError::DuplicateSku(sku) => write!(f, "sku {sku} already exists"),
        }
    }
}

impl std::error::Error for StockError {}
