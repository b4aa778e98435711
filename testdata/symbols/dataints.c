// dataints.c holds integer data symbols as V8's postmortem table does
// (v8dbg_*: ints in .data, zeros in .bss), others of each size, one with
// another prefix, and a byte table, for objfile's DataInts and DataBytes.
#include <stdint.h>

int v8dbg_off_fp_function = -16;
int v8dbg_SmiTag;                 /* zero: in .bss */
const int16_t v8dbg_short = 300;
const int8_t v8dbg_byte = -2;
const int64_t v8dbg_long = 1LL << 40;
int other_prefix = 7;
const char v8dbg_text[16] = "not an integer";
const uint8_t table[6] = {1, 2, 3, 5, 8, 13};

int main(void) { return v8dbg_off_fp_function + v8dbg_SmiTag + v8dbg_short + v8dbg_byte + other_prefix + table[0] + (int)v8dbg_long + v8dbg_text[0]; }
