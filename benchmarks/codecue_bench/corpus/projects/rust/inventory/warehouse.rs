//! A warehouse: items and the quantity of each on hand, with a log of movements.

use std::collections::HashMap;

use crate::item::{Item, StockError};

#[derive(Debug, Clone, PartialEq)]
pub enum Movement {
    Received { sku: String, quantity: u32 },
    Shipped { sku: String, quantity: u32 },
    Adjusted { sku: String, delta: i64, reason: String },
}

#[derive(Default)]
pub struct Warehouse {
    items: HashMap<String, Item>,
    on_hand: HashMap<String, u32>,
    log: Vec<Movement>,
}

impl Warehouse {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, item: Item) -> Result<(), StockError> {
        if self.items.contains_key(&item.sku) {
            return Err(StockError::DuplicateSku(item.sku.clone()));
        }
        self.on_hand.insert(item.sku.clone(), 0);
        self.items.insert(item.sku.clone(), item);
        Ok(())
    }

    pub fn item(&self, sku: &str) -> Result<&Item, StockError> {
        self.items.get(sku).ok_or_else(|| StockError::UnknownSku(sku.to_string()))
    }

    pub fn quantity(&self, sku: &str) -> u32 {
        self.on_hand.get(sku).copied().unwrap_or(0)
    }

    pub fn receive(&mut self, sku: &str, quantity: u32) -> Result<(), StockError> {
        self.item(sku)?;
        *self.on_hand.entry(sku.to_string()).or_insert(0) += quantity;
        self.log.push(Movement::Received { sku: sku.to_string(), quantity });
        Ok(())
    }

    pub fn ship(&mut self, sku: &str, quantity: u32) -> Result<(), StockError> {
        let available = self.quantity(sku);
        self.item(sku)?;
        if available < quantity {
            return Err(StockError::Insufficient { sku: sku.to_string(), wanted: quantity, available });
        }
        self.on_hand.insert(sku.to_string(), available - quantity);
        self.log.push(Movement::Shipped { sku: sku.to_string(), quantity });
        Ok(())
    }

    pub fn items(&self) -> impl Iterator<Item = &Item> {
        self.items.values()
    }

    pub fn movements(&self) -> &[Movement] {
        &self.log
    }
}
