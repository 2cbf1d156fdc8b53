/*
 * The share daemon's C front across fork(), on the CPU device (a child
 * forked on CUDA cannot use the GPU at all):
 *  - a reader's handle of a sealed buffer refuses tandem_share_buffer_write,
 *    and a forked child that stores through the device address of its own
 *    reader's mapping dies of SIGSEGV, leaving the sealed bytes as they were;
 *  - a forked child uses the parent's tandem_share handle as a client of its
 *    own: it opens, reads, creates, seals and deletes buffers, deletes the
 *    parent's buffer and closes everything, while the buffer the parent
 *    holds keeps its bytes, and the daemon serves the parent on.
 *
 *   c_share_fork SOCKET
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tandem.h"

#define LEN ((size_t)1 << 20)

/* The parent's buffer, the child's and the parent's after the fork. */
enum { SEED_HELD = 7, SEED_CHILD = 9, SEED_AFTER = 1 };

/* What a forked child inherits: the parent's handles and its buffer's id. */
struct parent {
  tandem_share *share;
  tandem_share_buffer *writer, *held;
  uint64_t id;
};

/* Prints the failed call and its message, and says whether it failed. */
static int failed(tandem_status status, const char *call) {
  if (status == TANDEM_STATUS_OK) {
    return 0;
  }
  fprintf(stderr, "c_share_fork[%ld]: %s: code %d: %s\n", (long)getpid(), call, (int)status,
          tandem_last_error_message());
  return 1;
}

/* Byte i of a buffer filled from seed: it varies within each page and
 * between pages, so a page mapped from the wrong place shows. */
static uint8_t pattern(uint8_t seed, size_t i) { return (uint8_t)(seed + i * 7 + (i >> 12)); }

/* LEN bytes of scratch memory, or NULL after saying so. */
static uint8_t *scratch(void) {
  uint8_t *bytes = malloc(LEN);
  if (bytes == NULL) {
    fprintf(stderr, "c_share_fork: out of memory\n");
  }
  return bytes;
}

/* Whether the whole of `buffer`, read through tandem_share_buffer_read,
 * holds seed's pattern; the first byte that differs is said. */
static int holds(const tandem_share_buffer *buffer, uint8_t seed) {
  uint8_t *bytes = scratch();
  size_t i;
  int same = 0;
  if (bytes == NULL) {
    return 0;
  }
  if (!failed(tandem_share_buffer_read(buffer, 0, bytes, LEN), "tandem_share_buffer_read")) {
    for (i = 0; i < LEN && bytes[i] == pattern(seed, i); ++i) {
    }
    same = i == LEN;
    if (!same) {
      fprintf(stderr, "c_share_fork[%ld]: byte %zu is %u, not %u\n", (long)getpid(), i, (unsigned)bytes[i],
              (unsigned)pattern(seed, i));
    }
  }
  free(bytes);
  return same;
}

/* A buffer of LEN filled from seed by tandem_share_buffer_write and sealed:
 * its id, and its handle (the writer's, now sealed) in *out. */
static int make_sealed(const tandem_share *share, uint8_t seed, uint64_t *id,
                       tandem_share_buffer **out) {
  uint8_t *bytes = scratch();
  size_t i;
  int ok = 0;
  *out = NULL;
  if (bytes == NULL) {
    return 0;
  }
  for (i = 0; i < LEN; ++i) {
    bytes[i] = pattern(seed, i);
  }
  ok = !failed(tandem_share_create(share, 0, LEN, id, out), "tandem_share_create") &&
       !failed(tandem_share_buffer_write(*out, 0, bytes, LEN), "tandem_share_buffer_write") &&
       !failed(tandem_share_buffer_seal(*out), "tandem_share_buffer_seal");
  free(bytes);
  return ok;
}

/* Forks; the child runs `child` and ends with _exit and its result, so that
 * none of the parent's exit handlers or stdio buffers run twice. The child's
 * wait status, or -1. */
static int fork_and_wait(int (*child)(const struct parent *), const struct parent *parent) {
  pid_t pid;
  int status = 0;
  fflush(NULL);
  pid = fork();
  if (pid < 0) {
    perror("c_share_fork: fork");
    return -1;
  }
  if (pid == 0) {
    _exit(child(parent));
  }
  if (waitpid(pid, &status, 0) != pid) {
    perror("c_share_fork: waitpid");
    return -1;
  }
  return status;
}

/* The child of the store: opens the sealed buffer (its own read-only
 * mapping) and stores through its device address. Returns only if the
 * store was not refused. */
static int store_into_sealed(const struct parent *parent) {
  tandem_share_buffer *opened = NULL;
  uint64_t device_ptr = 0;
  /* The fault is the expected end: no core file for it. */
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  if (failed(tandem_share_get(parent->share, parent->id, 0, &opened), "tandem_share_get") ||
      failed(tandem_share_buffer_info(opened, NULL, &device_ptr, NULL), "tandem_share_buffer_info")) {
    return 2;
  }
  *(volatile uint8_t *)(uintptr_t)device_ptr = (uint8_t)~pattern(SEED_HELD, 0);
  fprintf(stderr, "c_share_fork: a store into sealed buffer %llu was not refused\n",
          (unsigned long long)parent->id);
  return 3;
}

/* The child that goes on with the parent's handle; its exit code says
 * which step failed. */
static int use_the_share(const struct parent *parent) {
  tandem_share *share = parent->share;
  tandem_share_buffer *opened = NULL;
  int i;
  if (failed(tandem_share_get(share, parent->id, 0, &opened), "tandem_share_get")) {
    return 10;
  }
  if (!holds(opened, SEED_HELD)) {
    return 11;
  }
  for (i = 0; i < 4; ++i) {
    tandem_share_buffer *made = NULL;
    uint64_t made_id = 0;
    int ok = make_sealed(share, SEED_CHILD, &made_id, &made) && holds(made, SEED_CHILD) &&
             !failed(tandem_share_delete(share, made_id), "tandem_share_delete");
    if (failed(tandem_share_buffer_close(made), "tandem_share_buffer_close") || !ok) {
      return 12;
    }
  }
  /* The inherited handles close too: the parent's lease and mapping are
   * not the child's to give back. */
  if (failed(tandem_share_delete(share, parent->id), "tandem_share_delete") ||
      failed(tandem_share_buffer_close(opened), "tandem_share_buffer_close") ||
      failed(tandem_share_buffer_close(parent->held), "tandem_share_buffer_close") ||
      failed(tandem_share_buffer_close(parent->writer), "tandem_share_buffer_close") ||
      failed(tandem_share_close(share), "tandem_share_close")) {
    return 13;
  }
  return 0;
}

/* Says how the child ended, and whether that is a clean exit. */
static int exited(int status, const char *child) {
  if (status == -1) {
    return 0;
  }
  if (WIFSIGNALED(status)) {
    printf("c_share_fork: %s: killed by signal %d\n", child, WTERMSIG(status));
    return 0;
  }
  printf("c_share_fork: %s: exit %d\n", child, WEXITSTATUS(status));
  return WEXITSTATUS(status) == 0;
}

/* Says how the child ended, and whether SIGSEGV killed it. */
static int segfaulted(int status, const char *child) {
  if (status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) {
    printf("c_share_fork: %s: killed by SIGSEGV\n", child);
    return 1;
  }
  exited(status, child);
  return 0;
}

int main(int argc, char **argv) {
  struct parent p = {NULL, NULL, NULL, 0};
  uint8_t byte = 0;
  int i, rc = 1;
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
    return 2;
  }
  if (failed(tandem_share_connect(argv[1], &p.share), "tandem_share_connect")) {
    return 1;
  }
  if (!make_sealed(p.share, SEED_HELD, &p.id, &p.writer) ||
      failed(tandem_share_get(p.share, p.id, 0, &p.held), "tandem_share_get")) {
    goto done;
  }
  /* Sealed, the buffer is nobody's to write: its writer's handle nor a
   * reader's. */
  if (tandem_share_buffer_write(p.writer, 0, &byte, 1) != TANDEM_STATUS_REFUSED ||
      tandem_share_buffer_write(p.held, 0, &byte, 1) != TANDEM_STATUS_REFUSED) {
    fprintf(stderr, "c_share_fork: a write to a sealed buffer was not refused\n");
    goto done;
  }
  printf("c_share_fork: writes to sealed buffer %llu refused\n", (unsigned long long)p.id);
  if (!segfaulted(fork_and_wait(store_into_sealed, &p), "the storing child")) {
    goto done;
  }
  /* The next child is a later reader of its own: it checks the bytes. */
  if (!exited(fork_and_wait(use_the_share, &p), "the child using the share") ||
      !holds(p.held, SEED_HELD)) {
    goto done;
  }
  /* The daemon answers the parent, and new buffers of the same size (their
   * memory possibly what the child's deletes freed) leave the held one's
   * bytes alone. */
  for (i = 0; i < 4; ++i) {
    tandem_share_buffer *made = NULL, *opened = NULL;
    uint64_t made_id = 0;
    int ok = make_sealed(p.share, SEED_AFTER, &made_id, &made) &&
             !failed(tandem_share_get(p.share, made_id, 0, &opened), "tandem_share_get") &&
             holds(opened, SEED_AFTER) && !failed(tandem_share_delete(p.share, made_id), "tandem_share_delete");
    if (failed(tandem_share_buffer_close(opened), "tandem_share_buffer_close") ||
        failed(tandem_share_buffer_close(made), "tandem_share_buffer_close") || !ok) {
      goto done;
    }
  }
  if (holds(p.held, SEED_HELD)) {
    printf("c_share_fork: buffer %llu kept its %zu bytes\n", (unsigned long long)p.id, LEN);
    printf("c_share_fork: ok\n");
    rc = 0;
  }
done:
  if (failed(tandem_share_buffer_close(p.held), "tandem_share_buffer_close") ||
      failed(tandem_share_buffer_close(p.writer), "tandem_share_buffer_close") ||
      failed(tandem_share_close(p.share), "tandem_share_close")) {
    rc = 1;
  }
  return rc;
}
