// ticker is the smallest process with a heartbeat, for the daemon's
// benchmarks: it wakes every 100 ms (a context switch, which
// --heartbeat-proc sees) and, given a UDP port, sends one DogStatsD metric
// to 127.0.0.1 at each wake-up, as a service reporting to its agent does.
//
//   ticker TAG [PORT]
//
// TAG is only there to be matched in its command line.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
	int fd = -1;
	struct sockaddr_in to = {0};
	char msg[128];
	if (argc > 2) {
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		to.sin_family = AF_INET;
		to.sin_port = htons(atoi(argv[2]));
		to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		snprintf(msg, sizeof msg, "bench.heartbeat:1|c|#tag:%s", argv[1]);
	}
	printf("ready\n");
	fflush(stdout);
	struct timespec ts = {0, 100 * 1000 * 1000};
	for (;;) {
		nanosleep(&ts, NULL);
		if (fd >= 0)
			sendto(fd, msg, strlen(msg), 0, (struct sockaddr *)&to, sizeof to);
	}
}
