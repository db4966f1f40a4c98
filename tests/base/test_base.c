/* Unit tests for src/base: status codes and messages, JSON helpers, files, bytes format.
 * Run: build/tests/test_base */
#include "nbtest.h"

#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "base/progress.h"

static void test_status(void)
{
    NB_CHECK(!strcmp(nb_strerror(NB_OK), "ok"));
    for (int s = 0; s < NB_STATUS_COUNT; s++) NB_CHECK(nb_strerror((nb_status)s)[0] != 0);
    NB_CHECK(!strcmp(nb_strerror((nb_status)999), "unknown status"));
    NB_CHECK(nb_error(NB_ERR_FORMAT, "file %s bad", "x.json") == NB_ERR_FORMAT);
    NB_CHECK(!strcmp(nb_last_error(), "file x.json bad"));
    nb_error_wrap(NB_ERR_FORMAT, "loading %d", 3);
    NB_CHECK(!strcmp(nb_last_error(), "loading 3: file x.json bad"));
    NB_CHECK(!strcmp(nb_version(), "0.1.0"));
}

static void test_json(void)
{
    cJSON *j = NULL;
    const char *bad = "{\n  \"a\": 1,\n  \"b\": }";
    NB_CHECK_STATUS(nb_json_parse("t", bad, strlen(bad), &j), NB_ERR_FORMAT);
    NB_CHECK_MSG(strstr(nb_last_error(), "line 3") != NULL, "%s", nb_last_error());
    const char *good = "{\"i\": 7, \"f\": 2.5, \"b\": true, \"s\": \"x\", \"n\": null}";
    NB_CHECK_OK(nb_json_parse("t", good, strlen(good), &j));
    int64_t i;
    double f;
    int b, found;
    const char *s;
    NB_CHECK_OK(nb_json_int(j, "i", 0, &i, "t", &found));
    NB_CHECK(i == 7 && found);
    NB_CHECK_STATUS(nb_json_int(j, "f", 0, &i, "t", NULL), NB_ERR_FORMAT);
    NB_CHECK(strstr(nb_last_error(), "'f'") != NULL);
    NB_CHECK_OK(nb_json_num(j, "f", 0, &f, "t", NULL));
    NB_CHECK(f == 2.5);
    NB_CHECK_OK(nb_json_bool(j, "b", 0, &b, "t", NULL));
    NB_CHECK(b == 1);
    NB_CHECK_OK(nb_json_str(j, "s", NULL, &s, "t", NULL));
    NB_CHECK(s && !strcmp(s, "x"));
    NB_CHECK_OK(nb_json_int(j, "n", 42, &i, "t", &found)); /* null counts as absent */
    NB_CHECK(i == 42 && !found);
    NB_CHECK_STATUS(nb_json_str(j, "i", NULL, &s, "t", NULL), NB_ERR_FORMAT);
    cJSON_Delete(j);
}

static void test_files(void)
{
    char path[] = "/tmp/nb_test_base_XXXXXX";
    NB_CHECK(mkdtemp(path) != NULL);
    char f[512];
    nb_path_join(f, sizeof f, path, "a/b");
    NB_CHECK_OK(nb_mkdirs(f));
    nb_path_join(f, sizeof f, path, "a/b/c.txt");
    NB_CHECK_OK(nb_write_file(f, "hello", 5));
    char *buf;
    size_t len;
    NB_CHECK_OK(nb_read_file(f, &buf, &len, 0));
    NB_CHECK(len == 5 && !strcmp(buf, "hello"));
    free(buf);
    NB_CHECK_STATUS(nb_read_file(f, &buf, &len, 3), NB_ERR_IO);
    NB_CHECK_STATUS(nb_read_file("/nonexistent/x", &buf, &len, 0), NB_ERR_IO);
    NB_CHECK(strstr(nb_last_error(), "/nonexistent/x") != NULL);
}

static void test_format_bytes(void)
{
    char b[32];
    NB_CHECK(!strcmp(nb_format_bytes(512, b, sizeof b), "512 B"));
    NB_CHECK(!strcmp(nb_format_bytes(1536, b, sizeof b), "1.50 KiB"));
    NB_CHECK(!strcmp(nb_format_bytes(3.0 * (1 << 30), b, sizeof b), "3.00 GiB"));
    NB_CHECK(nb_log_level_parse("debug") == NB_LOG_DEBUG);
    NB_CHECK(nb_log_level_parse("nope") == -1);
}

static const nb_test tests[] = {
    {"status", test_status},
    {"json", test_json},
    {"files", test_files},
    {"format_bytes", test_format_bytes},
};

int main(int argc, char **argv) { return nb_test_main(tests, NB_ARRAY_LEN(tests), argc, argv); }
