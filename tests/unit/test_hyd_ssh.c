/*
 * tests/unit/test_hyd_ssh.c — the ssh transport's client side
 * (hydrator/fetch/hyd_ssh.c) without an sshd (e2e 400 runs a real one):
 * which arguments name an ssh source (rsync's rule), what is refused
 * before anything runs, and the session itself with a stand-in for ssh
 * (--rsh "sh -c ..."): the "ready" handshake, the URL and namespace made
 * of the source, the end of the session when ssh's input closes, and a
 * "remote" that ends before it is ready. Nothing may be left behind: no
 * child, no socket directory.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hydrator/hydrator.h"
#include "tsupport.h"

static void test_source(void **state)
{
	(void)state;
	assert_int_equal(hyd_ssh_source("host:/data"), 1);
	assert_int_equal(hyd_ssh_source("user@host:data/x"), 1);
	assert_int_equal(hyd_ssh_source("host:"), 1);
	assert_int_equal(hyd_ssh_source("ssh://host/data"), 1);
	assert_int_equal(hyd_ssh_source("ssh://u@[::1]:2222/d"), 1);
	/* URLs, local names (a '/' before the ':'), no host */
	assert_int_equal(hyd_ssh_source("http://h:1/v1/x"), 0);
	assert_int_equal(hyd_ssh_source("https://h/v1/x"), 0);
	assert_int_equal(hyd_ssh_source("ftp://h/v1/x"), 0);
	assert_int_equal(hyd_ssh_source("./a:b"), 0);
	assert_int_equal(hyd_ssh_source("/abs/a:b"), 0);
	assert_int_equal(hyd_ssh_source(":path"), 0);
	assert_int_equal(hyd_ssh_source("plain"), 0);
	assert_int_equal(hyd_ssh_source(NULL), 0);
}

/* No socket directory of ours younger than t0 in /tmp. */
static void assert_no_dir_since(time_t t0)
{
	char cmd[256], out[256] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "find /tmp -maxdepth 1 -type d -name 'ferry-ssh-*' "
		 "-newermt @%lld",
		 (long long)t0 - 1);
	p = popen(cmd, "r");
	assert_non_null(p);
	if (!fgets(out, sizeof(out), p))
		out[0] = '\0';
	pclose(p);
	assert_string_equal(out, "");
}

static void test_refused(void **state)
{
	struct hyd_ssh_opts o = {.rsh = "sh -c 'exit 0'"};
	struct hyd_ssh s;
	char err[512];

	(void)state;
	assert_int_equal(
	    hyd_ssh_start("host::module", &o, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "daemon syntax"));
	assert_int_equal(hyd_ssh_start("ssh://host", &o, &s, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(
	    hyd_ssh_start("ssh://host:99999/d", &o, &s, err, sizeof(err)),
	    -EINVAL);
	assert_non_null(strstr(err, "bad port"));
	assert_int_equal(
	    hyd_ssh_start("-oProxyCommand=x:d", &o, &s, err, sizeof(err)),
	    -EINVAL);
	o.rsh = "ssh 'unbalanced";
	assert_int_equal(hyd_ssh_start("host:d", &o, &s, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "--rsh"));
}

/* A stand-in for ssh: its arguments are the ones ssh would get (checked
 * into a file), it says "ready" as the remote replicator would, and it
 * lives until its input ends. */
static void test_session(void **state)
{
	char dir[] = "/tmp/ferry-ut-ssh-XXXXXX", rsh[512], args[64];
	char line[4096], err[512];
	struct hyd_ssh_opts o = {0};
	struct hyd_ssh s, s2;
	time_t t0 = time(NULL);
	FILE *f;
	int pid;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(args, sizeof(args), "%s/args", dir);
	snprintf(rsh, sizeof(rsh),
		 "sh -c 'printf \"%%s\\n\" \"$@\" >%s; echo noise; echo "
		 "ready; cat >/dev/null' stand-in",
		 args);
	o.rsh = rsh;
	o.remote_ferry = "/opt/ferry/bin/ferry-replicator";
	assert_int_equal(hyd_ssh_start("ssh://me@box:2200/data/set", &o, &s,
				       err, sizeof(err)),
			 0);
	assert_string_equal(s.dest, "me@box");
	assert_int_equal(s.port, 2200);
	assert_string_equal(s.path, "/data/set");
	assert_int_equal(strncmp(s.url, "http://localhost/v1/s", 21), 0);
	assert_string_equal(s.url + 20, s.ns);
	assert_int_equal(strlen(s.ns), 17);
	/* what ssh was told: a forward to the remote socket, the port, the
	 * host, one remote command with the replicator's path quoted */
	f = fopen(args, "r");
	assert_non_null(f);
	line[0] = '\0';
	{
		char all[4096] = "";

		while (fgets(line, sizeof(line), f))
			strncat(all, line, sizeof(all) - strlen(all) - 1);
		assert_non_null(strstr(all, "-L\n"));
		assert_non_null(strstr(all, ":/tmp/ferry-ssh-"));
		assert_non_null(strstr(all, "-p\n2200\n--\nme@box\n"));
		assert_non_null(strstr(all, "exec '/opt/ferry/bin/"
					    "ferry-replicator' -q --session"));
		assert_non_null(strstr(all, "='/data/set'"));
	}
	fclose(f);
	pid = s.pid;
	assert_true(pid > 0);
	/* the same source names the same namespace (and cache) */
	assert_int_equal(hyd_ssh_start("ssh://me@box:2200/data/set", &o, &s2,
				       err, sizeof(err)),
			 0);
	assert_string_equal(s.ns, s2.ns);
	assert_string_not_equal(s.sock, s2.sock);
	hyd_ssh_stop(&s2);
	/* the end of the session: the stand-in's input closes, it exits */
	hyd_ssh_stop(&s);
	assert_int_equal(kill(pid, 0), -1);
	assert_int_equal(s.to_fd, -1);
	hyd_ssh_stop(&s); /* idempotent */
	assert_no_dir_since(t0);

	/* a "remote" that ends before it is ready */
	o.rsh = "sh -c 'echo nothing here' stand-in";
	assert_int_equal(hyd_ssh_start("box:/d", &o, &s, err, sizeof(err)),
			 -ECONNREFUSED);
	assert_non_null(strstr(err, "ssh box: the session ended"));
	assert_no_dir_since(t0);
	unlink(args);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_source),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_session),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
