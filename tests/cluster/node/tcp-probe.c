/* A network probe for the test node's NetworkPolicy suite (built static, no libraries):
 *   tcp-probe connect ADDRESS:PORT TIMEOUT_MS [AFTER_MS]
 *       prints connected, refused, timed out or unreachable (exit 0: the outcome is the
 *       answer), AFTER_MS after it starts (default: at once)
 *   tcp-probe listen PORT                       answers every connection with "hello\n"
 *   tcp-probe proxy-get http://HOST:PORT/PATH    GET through the proxy HTTP_PROXY names
 *       (http://ADDRESS:PORT), printing the answer, or why there is none (exit 0)
 * The suite only ever points it at addresses it made itself (pods, the node, the machine's end
 * of the node's link). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int probe(char *target, int timeout_ms) {
  char *colon = strrchr(target, ':');
  if (!colon) {
    fprintf(stderr, "expected ADDRESS:PORT, got %s\n", target);
    return 2;
  }
  *colon = 0;
  const char *address = target;
  int port = atoi(colon + 1);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
  if (inet_pton(AF_INET, address, &to.sin_addr) != 1) {
    fprintf(stderr, "not an IPv4 address: %s\n", address);
    return 2;
  }
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (s < 0) {
    printf("unreachable: socket: %s\n", strerror(errno));
    return 0;
  }
  if (connect(s, (struct sockaddr *)&to, sizeof to) == 0) {
    printf("connected\n");
    return 0;
  }
  if (errno != EINPROGRESS) {
    printf(errno == ECONNREFUSED ? "refused\n" : "unreachable: %s\n", strerror(errno));
    return 0;
  }
  struct pollfd p = {.fd = s, .events = POLLOUT};
  int ready = poll(&p, 1, timeout_ms);
  if (ready == 0) {
    printf("timed out\n");
    return 0;
  }
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == 0)
    printf("connected\n");
  else if (err == ECONNREFUSED)
    printf("refused\n");
  else
    printf("unreachable: %s\n", strerror(err));
  return 0;
}

static int listen_on(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
  if (bind(s, (struct sockaddr *)&at, sizeof at) != 0 || listen(s, 64) != 0) {
    perror("listen");
    return 1;
  }
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    ssize_t n = write(c, "hello\n", 6);
    (void)n;
    close(c);
  }
}

static int proxy_get(const char *url) {
  const char *proxy = getenv("HTTP_PROXY");
  if (!proxy || strncmp(proxy, "http://", 7) != 0) {
    printf("no proxy: HTTP_PROXY is %s\n", proxy ? proxy : "unset");
    return 0;
  }
  char target[64];
  snprintf(target, sizeof target, "%s", proxy + 7);
  char *colon = strrchr(target, ':');
  if (!colon) return 2;
  *colon = 0;
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(colon + 1))};
  if (inet_pton(AF_INET, target, &to.sin_addr) != 1) return 2;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&to, sizeof to) != 0) {
    printf("proxy unreachable: %s\n", strerror(errno));
    return 0;
  }
  const char *host = strstr(url, "://");
  host = host ? host + 3 : url;
  char request[1024];
  int n = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: %.*s\r\nConnection: close\r\n\r\n",
                   url, (int)strcspn(host, "/"), host);
  if (write(s, request, (size_t)n) != n) return 1;
  char buf[4096];
  ssize_t got;
  while ((got = read(s, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)got, stdout);
  return 0;
}

int main(int argc, char **argv) {
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "connect") == 0) {
    if (argc == 5) usleep((useconds_t)atoi(argv[4]) * 1000);
    return probe(argv[2], atoi(argv[3]));
  }
  if (argc == 3 && strcmp(argv[1], "listen") == 0) return listen_on(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "proxy-get") == 0) return proxy_get(argv[2]);
  fprintf(stderr, "usage: tcp-probe connect ADDRESS:PORT TIMEOUT_MS [AFTER_MS] | tcp-probe listen PORT | tcp-probe proxy-get URL\n");
  return 2;
}
