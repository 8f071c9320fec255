/*
 * The WebSocket handshake pieces (src/api/ws.c): Sec-WebSocket-Accept (the
 * RFC 6455 example) and the Upgrade request parser's answers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api/ws.h"

static void test_accept(void **st)
{
    char out[29];
    /* RFC 6455 section 1.3 */
    assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", 24, out), 0);
    assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static int parse(const char *head, char key[25])
{
    return ws_parse_upgrade(head, strlen(head), key);
}

#define HDRS                                                                                       \
    "Host: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"                         \
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

static void test_parse(void **st)
{
    char key[25];
    assert_int_equal(parse("GET /api/current HTTP/1.1\r\n" HDRS, key), 0);
    assert_string_equal(key, "dGhlIHNhbXBsZSBub25jZQ==");
    assert_int_equal(parse("GET /websocket HTTP/1.1\r\n" HDRS, key), 0);
    assert_int_equal(parse("GET /api/v25.04.0 HTTP/1.1\r\n" HDRS, key), 0);
    assert_int_equal(parse("GET /api/current?x=1 HTTP/1.1\r\n" HDRS, key), 0);
    /* header names and tokens are case-insensitive */
    assert_int_equal(parse("GET /api/current HTTP/1.1\r\nupgrade: WebSocket\r\n"
                           "connection: upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                           "sec-websocket-version: 13\r\n\r\n",
                           key),
                     0);
    assert_int_equal(parse("GET /other HTTP/1.1\r\n" HDRS, key), 404);
    assert_int_equal(parse("GET /api/vx HTTP/1.1\r\n" HDRS, key), 404);
    assert_int_equal(parse("POST /api/current HTTP/1.1\r\n" HDRS, key), 405);
    assert_int_equal(parse("GET /api/current HTTP/1.1\r\nHost: x\r\n\r\n", key), 400);
    assert_int_equal(parse("GET /api/current\r\n" HDRS, key), 400);
    assert_int_equal(parse("garbage", key), 400);
    assert_int_equal(parse("GET /api/current HTTP/1.1\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: short\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n",
                           key),
                     400);
    assert_int_equal(parse("GET /api/current HTTP/1.1\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                           "Sec-WebSocket-Version: 8\r\n\r\n",
                           key),
                     426);
    /* "Connection: Upgrades" is not the token */
    assert_int_equal(parse("GET /api/current HTTP/1.1\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrades\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n",
                           key),
                     400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accept),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
