/* A fixed-size ring buffer of bytes. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *data;
    size_t capacity;
    size_t head;  /* next byte to read */
    size_t size;  /* bytes stored */
} ring_buffer;

/** Allocates a ring buffer; returns NULL when out of memory. */
ring_buffer *ring_new(size_t capacity) {
    ring_buffer *rb = malloc(sizeof(ring_buffer));
    if (rb == NULL) {
        return NULL;
    }
    rb->data = malloc(capacity);
    if (rb->data == NULL) {
        free(rb);
        return NULL;
    }
    rb->capacity = capacity;
    rb->head = 0;
    rb->size = 0;
    return rb;
}

void ring_free(ring_buffer *rb) {
    if (rb != NULL) {
        free(rb->data);
        free(rb);
    }
}

/* Writes up to len bytes; returns how many fit. */
size_t ring_write(ring_buffer *rb, const unsigned char *src, size_t len) {
    size_t written = 0;
    while (written < len && rb->size < rb->capacity) {
        size_t tail = (rb->head + rb->size) % rb->capacity;
        rb->data[tail] = src[written];
        rb->size++;
        written++;
    }
    return written;
}

size_t ring_read(ring_buffer *rb, unsigned char *dst, size_t len) {
    size_t read = 0;
    while (read < len && rb->size > 0) {
        dst[read] = rb->data[rb->head];
        rb->head = (rb->head + 1) % rb->capacity;
        rb->size--;
        read++;
    }
    return read;
}

int main(void) {
    ring_buffer *rb = ring_new(8);
    const char *message = "hello, ring";
    size_t n = ring_write(rb, (const unsigned char *)message, strlen(message));
    printf("wrote %zu of %zu bytes\n", n, strlen(message));
    unsigned char out[16] = {0};
    size_t m = ring_read(rb, out, sizeof(out) - 1);
    printf("read %zu bytes: %s\n", m, out);
    ring_free(rb);
    return 0;
}
