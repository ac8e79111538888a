/*
 * symtab.c - a chained hash table mapping identifiers to symbol records, with nested scopes
 * as used by a compiler front end: entering a block pushes a scope, leaving it pops every
 * symbol declared inside.
 */
#define _POSIX_C_SOURCE 200809L /* for strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 211 /* prime, so hash values spread across buckets */

typedef enum { SYM_VARIABLE, SYM_FUNCTION, SYM_TYPE } SymbolKind;

typedef struct Symbol {
    char *name;
    SymbolKind kind;
    int depth;            /* scope depth where it was declared */
    int line;             /* for "previous declaration here" messages */
    struct Symbol *next;  /* next in the hash chain */
    struct Symbol *shadow_next; /* next declared in the same scope */
} Symbol;

typedef struct {
    Symbol *buckets[BUCKETS];
    Symbol *scope_stack[64]; /* head of each open scope's declaration list */
    int depth;
} SymbolTable;

static unsigned hash_name(const char *s) {
    unsigned h = 0;
    while (*s != '\0') {
        h = h * 31 + (unsigned char)*s++;
    }
    return h % BUCKETS;
}

void symtab_init(SymbolTable *table) {
    memset(table, 0, sizeof(*table));
}

int symtab_enter_scope(SymbolTable *table) {
    if (table->depth + 1 >= (int)(sizeof(table->scope_stack) / sizeof(table->scope_stack[0]))) {
        return -1;
    }
    table->scope_stack[++table->depth] = NULL;
    return 0;
}

Symbol *symtab_lookup(const SymbolTable *table, const char *name) {
    /* Inner declarations are inserted at the chain head, so the first match is the innermost. */
    for (Symbol *sym = table->buckets[hash_name(name)]; sym != NULL; sym = sym->next) {
        if (strcmp(sym->name, name) == 0) {
            return sym;
        }
    }
    return NULL;
}

/* Declares name in the current scope. Returns the existing symbol if it is already declared there. */
Symbol *symtab_declare(SymbolTable *table, const char *name, SymbolKind kind, int line, int *redeclared) {
    Symbol *existing = symtab_lookup(table, name);
    if (existing != NULL && existing->depth == table->depth) {
        *redeclared = 1;
        return existing;
    }
    *redeclared = 0;
    Symbol *sym = malloc(sizeof(*sym));
    if (sym == NULL || (sym->name = strdup(name)) == NULL) {
        free(sym);
        return NULL;
    }
    unsigned bucket = hash_name(name);
    sym->kind = kind;
    sym->depth = table->depth;
    sym->line = line;
    sym->next = table->buckets[bucket];
    table->buckets[bucket] = sym;
    sym->shadow_next = table->scope_stack[table->depth];
    table->scope_stack[table->depth] = sym;
    return sym;
}

void symtab_leave_scope(SymbolTable *table) {
    Symbol *sym = table->scope_stack[table->depth];
    while (sym != NULL) {
        Symbol *following = sym->shadow_next;
        unsigned bucket = hash_name(sym->name);
        /* The symbol is the chain head: nothing newer can exist once its scope is closing. */
        table->buckets[bucket] = sym->next;
        free(sym->name);
        free(sym);
        sym = following;
    }
    table->scope_stack[table->depth] = NULL;
    if (table->depth > 0) {
        table->depth--;
    }
}

static const char *kind_name(SymbolKind kind) {
    static const char *names[] = {"variable", "function", "type"};
    return names[kind];
}

int main(void) {
    SymbolTable table;
    symtab_init(&table);
    int redeclared = 0;
    symtab_declare(&table, "count", SYM_VARIABLE, 1, &redeclared);
    symtab_declare(&table, "main", SYM_FUNCTION, 3, &redeclared);

    symtab_enter_scope(&table);
    symtab_declare(&table, "count", SYM_TYPE, 5, &redeclared); /* shadows the global */
    Symbol *inner = symtab_lookup(&table, "count");
    printf("inside block: count is a %s from line %d\n", kind_name(inner->kind), inner->line);
    symtab_declare(&table, "count", SYM_VARIABLE, 6, &redeclared);
    if (redeclared) {
        fprintf(stderr, "line 6: redeclaration of 'count' (previous declaration on line %d)\n", inner->line);
    }
    symtab_leave_scope(&table);

    Symbol *outer = symtab_lookup(&table, "count");
    printf("after block: count is a %s from line %d\n", kind_name(outer->kind), outer->line);
    symtab_leave_scope(&table);
    return 0;
}
