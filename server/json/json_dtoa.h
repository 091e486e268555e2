/*
 * Double to shortest decimal text, in the format Triton's JSON writer
 * (rapidjson) produces: Grisu2 digits, then "2.0", "0.001", "1e-7",
 * "1.5e30". NaN and infinities are written as NaN, Infinity, -Infinity.
 */
#pragma once

#include <stddef.h>

/* Worst case is 25 characters ("-2.2250738585072014e-308"); 32 is safe. */
#define JSON_DTOA_BUFSIZE 32

/* Writes the text of `value` into buf (at least JSON_DTOA_BUFSIZE bytes),
 * without a terminating NUL. Returns the number of characters written. */
size_t json_dtoa(double value, char *buf);
