/*
 * The C ABI from plain C (C99): attach to a runtime, a task's round trip,
 * a blob put and get, and the runtime's status as JSON.
 *
 *   c_client SEGMENT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem.h"

/* Prints the failed call and its message, and says whether it failed. */
static int failed(tandem_status status, const char *call) {
  if (status == TANDEM_STATUS_OK) {
    return 0;
  }
  fprintf(stderr, "c_client: %s: code %d: %s\n", call, (int)status, tandem_last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  tandem_client *client = NULL;
  uint64_t sum = 0, tag = 0, size = 0;
  uint8_t data[256], back[256];
  size_t i, json_len = 0;
  char *json = NULL;
  int rc = 1;
  if (argc != 2) {
    fprintf(stderr, "usage: %s SEGMENT\n", argv[0]);
    return 2;
  }
  if (failed(tandem_client_attach(argv[1], &client), "tandem_client_attach")) {
    return 1;
  }
  for (i = 0; i < sizeof data; ++i) {
    data[i] = (uint8_t)(i * 5 + 1);
  }
  if (failed(tandem_client_add(client, 0, 40, 2, 10000, &sum), "tandem_client_add") ||
      failed(tandem_blob_tag(client, "c-client", 10000, &tag), "tandem_blob_tag") ||
      failed(tandem_blob_put(client, tag, "c", 0, data, sizeof data, 10000, &size), "tandem_blob_put") ||
      failed(tandem_blob_get(client, tag, "c", 0, back, sizeof back, 10000), "tandem_blob_get")) {
    goto done;
  }
  /* Asked with no buffer, the call says how much it needs, the NUL
   * included. */
  if (tandem_status_json(argv[1], NULL, 0, &json_len) != TANDEM_STATUS_INVALID_ARGUMENT) {
    fprintf(stderr, "c_client: a status call with no buffer was not refused\n");
    goto done;
  }
  /* The status is live: it may have grown since it was sized (a counter
   * gained a digit), and then the call says the new size. A few tries;
   * a status that keeps outgrowing its buffer is a failure, said. */
  for (int tries = 1;; ++tries) {
    tandem_status status;
    char *grown = realloc(json, json_len);
    if (grown == NULL) {
      fprintf(stderr, "c_client: out of memory for %zu bytes of status\n", json_len);
      goto done;
    }
    json = grown;
    status = tandem_status_json(argv[1], json, json_len, &json_len);
    if (status == TANDEM_STATUS_OK) {
      break;
    }
    if (status != TANDEM_STATUS_INVALID_ARGUMENT || tries == 4) {
      failed(status, "tandem_status_json");
      goto done;
    }
  }
  printf("c_client: 40 + 2 = %llu; blob of %llu bytes %s; status: %zu bytes of JSON\n", (unsigned long long)sum,
         (unsigned long long)size, memcmp(data, back, sizeof data) == 0 ? "got back" : "DIFFERS", strlen(json));
  if (sum == 42 && size == sizeof data && memcmp(data, back, sizeof data) == 0 && json[0] == '{' &&
      strlen(json) + 1 == json_len) {
    printf("c_client: ok\n");
    rc = 0;
  }
done:
  free(json);
  if (failed(tandem_client_close(client), "tandem_client_close")) {
    rc = 1;
  }
  return rc;
}
