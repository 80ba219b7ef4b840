/* The pod sandbox's pause process (the CRI sandbox_image of the test node): no registry is
 * reachable here, so the image is built from this file. It holds the pod's namespaces, reaps
 * orphans and exits on SIGINT or SIGTERM. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &q, NULL);
  sigaction(SIGTERM, &q, NULL);
  sigaction(SIGCHLD, &r, NULL);
  for (;;) pause();
  return 1;
}
