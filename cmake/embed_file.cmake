# cmake -DIN=file -DOUT=file.c -DSYM=name -P embed_file.cmake: IN's bytes as a C array.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# about 16 bytes a line
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "/* Generated: do not edit. */\n#include <stddef.h>\n"
     "extern const char ${SYM}[];\nextern const size_t ${SYM}_len;\n"
     "const char ${SYM}[] = {\n${bytes}0x00};\nconst size_t ${SYM}_len = ${len};\n")
