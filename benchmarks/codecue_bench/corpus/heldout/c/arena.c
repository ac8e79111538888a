/*
 * arena.c - a bump allocator with string interning, for programs that allocate many small
 * objects with the same lifetime (parsers, compilers) and free them all at once.
 */
#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_DEFAULT_BLOCK (64 * 1024)

typedef struct Block {
    struct Block *next;
    size_t capacity;
    size_t used;
    alignas(max_align_t) unsigned char data[];
} Block;

typedef struct {
    Block *head;
    size_t total_allocated;
    size_t block_count;
} Arena;

static size_t align_up(size_t n, size_t align) {
    return (n + align - 1) & ~(align - 1);
}

static Block *block_new(size_t capacity) {
    Block *block = malloc(sizeof(Block) + capacity);
    if (block == NULL) {
        return NULL;
    }
    block->next = NULL;
    block->capacity = capacity;
    block->used = 0;
    return block;
}

void arena_init(Arena *arena) {
    arena->head = NULL;
    arena->total_allocated = 0;
    arena->block_count = 0;
}

/* Returns zeroed memory aligned to `align` (a power of two), or NULL when out of memory. */
void *arena_alloc_aligned(Arena *arena, size_t size, size_t align) {
    assert(align != 0 && (align & (align - 1)) == 0);
    Block *block = arena->head;
    if (block != NULL) {
        size_t offset = align_up(block->used, align);
        if (offset + size <= block->capacity) {
            block->used = offset + size;
            arena->total_allocated += size;
            return memset(block->data + offset, 0, size);
        }
    }
    /* Oversized requests get a block of their own so the default block size stays small. */
    size_t capacity = size + align > ARENA_DEFAULT_BLOCK ? size + align : ARENA_DEFAULT_BLOCK;
    Block *fresh = block_new(capacity);
    if (fresh == NULL) {
        return NULL;
    }
    fresh->next = arena->head;
    arena->head = fresh;
    arena->block_count++;
    size_t offset = align_up(0, align);
    fresh->used = offset + size;
    arena->total_allocated += size;
    return memset(fresh->data + offset, 0, size);
}

#define arena_new(arena, type) ((type *)arena_alloc_aligned((arena), sizeof(type), alignof(type)))

char *arena_strndup(Arena *arena, const char *s, size_t len) {
    char *copy = arena_alloc_aligned(arena, len + 1, 1);
    if (copy != NULL) {
        memcpy(copy, s, len);
        copy[len] = '\0';
    }
    return copy;
}

void arena_free(Arena *arena) {
    Block *block = arena->head;
    while (block != NULL) {
        Block *next = block->next;
        free(block);
        block = next;
    }
    arena_init(arena);
}

/* ---- string interning: equal strings share one pointer, so comparison is pointer equality ---- */

typedef struct {
    Arena *arena;
    const char **slots;
    size_t capacity; /* always a power of two */
    size_t count;
} Interner;

static uint64_t fnv1a(const char *s, size_t len) {
    uint64_t hash = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        hash ^= (unsigned char)s[i];
        hash *= 1099511628211ULL;
    }
    return hash;
}

const char *intern(Interner *in, const char *s, size_t len) {
    if (in->count * 4 >= in->capacity * 3) {
        size_t new_capacity = in->capacity ? in->capacity * 2 : 64;
        const char **slots = calloc(new_capacity, sizeof(*slots));
        if (slots == NULL) {
            return NULL;
        }
        for (size_t i = 0; i < in->capacity; i++) {
            const char *old = in->slots[i];
            if (old == NULL) {
                continue;
            }
            size_t j = fnv1a(old, strlen(old)) & (new_capacity - 1);
            while (slots[j] != NULL) {
                j = (j + 1) & (new_capacity - 1);
            }
            slots[j] = old;
        }
        free(in->slots);
        in->slots = slots;
        in->capacity = new_capacity;
    }
    size_t i = fnv1a(s, len) & (in->capacity - 1);
    for (; in->slots[i] != NULL; i = (i + 1) & (in->capacity - 1)) {
        if (strncmp(in->slots[i], s, len) == 0 && in->slots[i][len] == '\0') {
            return in->slots[i];
        }
    }
    in->slots[i] = arena_strndup(in->arena, s, len);
    in->count++;
    return in->slots[i];
}

int main(void) {
    Arena arena;
    arena_init(&arena);
    Interner names = {.arena = &arena};
    const char *a = intern(&names, "identifier", 10);
    const char *b = intern(&names, "identifier_long", 10);
    printf("same pointer: %s, %zu bytes in %zu block(s)\n", a == b ? "yes" : "no", arena.total_allocated,
           arena.block_count);
    free(names.slots);
    arena_free(&arena);
    return 0;
}
