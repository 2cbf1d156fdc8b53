/*
 * Named sets through the share daemon's C front: a publisher stages two
 * buffers and a manifest for a name, fills and seals them, and binds them
 * as the name's first version; a reader looks the name up (sized by a first
 * call), opens the buffers by id and checks their bytes; the sets are
 * listed as JSON; bad names, unknown sets and unstaged buffers are refused
 * with their codes; the set is deleted.
 *
 *   c_share_sets SOCKET
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem.h"

#define LEN 4096
#define NAME "c-model"

/* Prints the failed call and its message, and says whether it failed. */
static int failed(tandem_status status, const char *call) {
  if (status == TANDEM_STATUS_OK) {
    return 0;
  }
  fprintf(stderr, "c_share_sets: %s: code %d: %s\n", call, (int)status, tandem_last_error_message());
  return 1;
}

/* Whether `status` is `want`, said when not. */
static int is(tandem_status status, tandem_status want, const char *call) {
  if (status == want) {
    return 1;
  }
  fprintf(stderr, "c_share_sets: %s: code %d, not %d: %s\n", call, (int)status, (int)want,
          tandem_last_error_message());
  return 0;
}

/* A buffer of `len` staged for NAME, filled with `seed` and sealed. */
static int staged(tandem_share *share, size_t len, uint8_t seed, uint64_t *id,
                  tandem_share_buffer **out) {
  uint8_t bytes[LEN];
  memset(bytes, seed, len);
  return !failed(tandem_share_create(share, 0, len, id, out), "tandem_share_create") &&
         !failed(tandem_share_stage(share, *id, NAME), "tandem_share_stage") &&
         !failed(tandem_share_buffer_write(*out, 0, bytes, len), "tandem_share_buffer_write") &&
         !failed(tandem_share_buffer_seal(*out), "tandem_share_buffer_seal");
}

/* Whether buffer `id`, opened by id, holds `len` bytes of `seed`. */
static int holds(tandem_share *share, uint64_t id, size_t len, uint8_t seed) {
  tandem_share_buffer *reader = NULL;
  uint8_t bytes[LEN];
  size_t i;
  int ok = !failed(tandem_share_get(share, id, 0, &reader), "tandem_share_get") &&
           !failed(tandem_share_buffer_read(reader, 0, bytes, len), "tandem_share_buffer_read");
  for (i = 0; ok && i < len; ++i) {
    ok = bytes[i] == seed;
  }
  tandem_share_buffer_close(reader);
  return ok;
}

/* The publisher's half: two buffers and a manifest bound as version 1. */
static int publish(tandem_share *share, uint64_t ids[2]) {
  tandem_share_buffer *buffers[4] = {NULL, NULL, NULL, NULL};
  uint64_t manifest = 0, unstaged = 0;
  int i;
  tandem_share_set_version bound;
  int ok = staged(share, LEN, 1, &ids[0], &buffers[0]) && staged(share, LEN, 2, &ids[1], &buffers[1]) &&
           staged(share, 16, 'm', &manifest, &buffers[2]);
  /* A buffer this process did not stage for the name is refused, whole. */
  ok = ok && !failed(tandem_share_create(share, 0, 64, &unstaged, &buffers[3]), "tandem_share_create") &&
       !failed(tandem_share_buffer_seal(buffers[3]), "tandem_share_buffer_seal") &&
       is(tandem_share_bind_set(share, NAME, manifest, &unstaged, 1, 1, NULL), TANDEM_STATUS_REFUSED,
          "a bind of an unstaged buffer");
  ok = ok && !failed(tandem_share_bind_set(share, NAME, manifest, ids, 2, 3, &bound), "tandem_share_bind_set");
  ok = ok && bound.version == 1 && bound.manifest == manifest && bound.tensors == 3 && bound.buffer_count == 2;
  /* Bound buffers outlive their writer's handles. */
  for (i = 0; i < 4; ++i) {
    tandem_share_buffer_close(buffers[i]);
  }
  return ok;
}

/* The reader's half: the version looked up by name, sized by a first call. */
static int look_up(tandem_share *share, const uint64_t ids[2]) {
  tandem_share_set_version version;
  uint64_t found[2] = {0, 0};
  int ok = is(tandem_share_lookup_set(share, NAME, 0, &version, NULL, 0), TANDEM_STATUS_INVALID_ARGUMENT,
              "a look-up with no room for ids") &&
           version.buffer_count == 2;
  ok = ok && !failed(tandem_share_lookup_set(share, NAME, 0, &version, found, 2), "tandem_share_lookup_set");
  ok = ok && version.version == 1 && found[0] == ids[0] && found[1] == ids[1];
  ok = ok && holds(share, found[0], LEN, 1) && holds(share, found[1], LEN, 2) && holds(share, version.manifest, 16, 'm');
  ok = ok && is(tandem_share_lookup_set(share, NAME, 2, &version, found, 2), TANDEM_STATUS_NOT_FOUND, "version 2");
  return ok;
}

/* The listing: sized, then filled; it names the set. */
static int listed(tandem_share *share) {
  size_t len = 0;
  char *json;
  int ok;
  if (!is(tandem_share_list_sets_json(share, NULL, 0, &len), TANDEM_STATUS_INVALID_ARGUMENT, "sizing the listing")) {
    return 0;
  }
  json = malloc(len);
  ok = json != NULL && !failed(tandem_share_list_sets_json(share, json, len, &len), "tandem_share_list_sets_json") &&
       strstr(json, "\"name\":\"" NAME "\"") != NULL && strstr(json, "\"version\":1") != NULL;
  if (ok) {
    printf("c_share_sets: listed %s\n", json);
  }
  free(json);
  return ok;
}

int main(int argc, char **argv) {
  tandem_share *share = NULL;
  tandem_share_set_version version;
  uint64_t ids[2] = {0, 0};
  int ok;
  if (argc != 2) {
    fprintf(stderr, "usage: c_share_sets SOCKET\n");
    return 2;
  }
  if (failed(tandem_share_connect(argv[1], &share), "tandem_share_connect")) {
    return 1;
  }
  ok = is(tandem_share_stage(share, 1, ""), TANDEM_STATUS_INVALID_ARGUMENT, "an empty name") &&
       is(tandem_share_lookup_set(share, "nothing", 0, &version, NULL, 0), TANDEM_STATUS_NOT_FOUND,
          "an unknown set") &&
       publish(share, ids) && look_up(share, ids) && listed(share) &&
       !failed(tandem_share_delete_set(share, NAME), "tandem_share_delete_set") &&
       is(tandem_share_lookup_set(share, NAME, 0, &version, NULL, 0), TANDEM_STATUS_NOT_FOUND, "a deleted set") &&
       is(tandem_share_delete_set(share, NAME), TANDEM_STATUS_NOT_FOUND, "a second delete");
  tandem_share_close(share);
  printf("c_share_sets: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
