/* A stand-in streaming server for benchmarks/bench_client_standin.py: llama-server's chat SSE chunks, as
 * fast as the socket takes them ("flood") or one every 5 ms ("paced"), each text chunk's content being the
 * CLOCK_MONOTONIC nanosecond at which it was handed to send() (Python's time.monotonic() reads the same
 * clock), so a client's stamp can be compared with the truth.
 *
 * Why C: a Python server would share the 2 cores' time with the client it measures and jitter the truth.
 *
 * Usage: standin_sse PORT flood|paced
 * Loopback only; one thread per connection; HTTP/1.1 keep-alive (a request saying "Connection: close" gets
 * its connection closed after the answer). The number of text chunks is the request's "max_tokens".
 * Built by the benchmark into a temporary folder with the system cc (-O2 -pthread).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int paced;
#define PACE_NS 5000000L
#define REQUEST_BYTES 65536

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int send_all(int fd, const char *data, size_t len) {
    while (len > 0) {
        ssize_t sent = send(fd, data, len, MSG_NOSIGNAL);
        if (sent <= 0) return -1;
        data += sent;
        len -= (size_t)sent;
    }
    return 0;
}

/* One SSE event as one HTTP chunk: "<hex size>\r\ndata: <json>\n\n\r\n". */
static int send_event(int fd, const char *json) {
    char out[2048];
    int body = (int)strlen(json) + 8;  /* "data: " + json + "\n\n" */
    int len = snprintf(out, sizeof out, "%x\r\ndata: %s\n\n\r\n", body, json);
    return send_all(fd, out, (size_t)len);
}

static const char *TAIL = "\"created\":1796036358,\"id\":\"chatcmpl-standin\",\"model\":\"embedded\","
                          "\"system_fingerprint\":\"b0-unknown\",\"object\":\"chat.completion.chunk\"";

static int answer(int fd, int tokens) {
    static const char *HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                              "Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=1000\r\n\r\n";
    char json[1536];
    if (send_all(fd, HEAD, strlen(HEAD))) return -1;
    snprintf(json, sizeof json, "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\","
             "\"content\":null}}],%s}", TAIL);
    if (send_event(fd, json)) return -1;
    long long first = now_ns(), last = first;
    for (int i = 0; i < tokens; i++) {
        if (paced) {
            struct timespec pause = {0, PACE_NS};
            nanosleep(&pause, NULL);
        }
        last = now_ns();
        snprintf(json, sizeof json, "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":"
                 "\"%lld;\"}}],%s}", last, TAIL);
        if (send_event(fd, json)) return -1;
    }
    snprintf(json, sizeof json, "{\"choices\":[{\"finish_reason\":\"length\",\"index\":0,\"delta\":{}}],%s}", TAIL);
    if (send_event(fd, json)) return -1;
    double predicted_ms = (double)(last - first) / 1e6;
    snprintf(json, sizeof json, "{\"choices\":[],%s,\"usage\":{\"completion_tokens\":%d,\"prompt_tokens\":27,"
             "\"total_tokens\":%d},\"timings\":{\"prompt_n\":27,\"prompt_ms\":1.0,\"predicted_n\":%d,"
             "\"predicted_ms\":%.3f,\"predicted_per_second\":%.3f}}", TAIL, tokens, tokens + 27, tokens,
             predicted_ms, predicted_ms > 0 ? tokens / predicted_ms * 1000 : 0.0);
    if (send_event(fd, json)) return -1;
    if (send_event(fd, "[DONE]")) return -1;
    return send_all(fd, "0\r\n\r\n", 5);
}

/* Reads one request (head and Content-Length body) into buf; returns its length, or -1 at EOF/error.
 * Bytes past the request (a pipelined next one) are not expected from the clients measured. */
static int read_request(int fd, char *buf) {
    int have = 0;
    for (;;) {
        buf[have] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            char *length = strcasestr(buf, "content-length:");
            int need = (int)(end + 4 - buf) + (length && length < end ? atoi(length + 15) : 0);
            if (need >= REQUEST_BYTES) return -1;
            while (have < need) {
                ssize_t got = recv(fd, buf + have, (size_t)(need - have), 0);
                if (got <= 0) return -1;
                have += (int)got;
            }
            buf[have] = 0;
            return have;
        }
        if (have >= REQUEST_BYTES - 1) return -1;
        ssize_t got = recv(fd, buf + have, (size_t)(REQUEST_BYTES - 1 - have), 0);
        if (got <= 0) return -1;
        have += (int)got;
    }
}

static void *serve(void *arg) {
    int fd = (int)(long)arg;
    char *buf = malloc(REQUEST_BYTES);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    while (buf && read_request(fd, buf) > 0) {
        char *field = strstr(buf, "\"max_tokens\"");
        int tokens = field ? atoi(strchr(field, ':') + 1) : 128;
        int close_after = strcasestr(buf, "connection: close") != NULL;
        if (answer(fd, tokens > 0 ? tokens : 1) || close_after) break;
    }
    free(buf);
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[2], "flood") && strcmp(argv[2], "paced"))) {
        fprintf(stderr, "usage: %s PORT flood|paced\n", argv[0]);
        return 2;
    }
    paced = strcmp(argv[2], "paced") == 0;
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 1024)) {
        perror("bind/listen");
        return 1;
    }
    printf("listening\n");
    fflush(stdout);
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) continue;
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        if (pthread_create(&thread, &attr, serve, (void *)(long)fd)) close(fd);
        pthread_attr_destroy(&attr);
    }
}
