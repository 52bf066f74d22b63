# tg_embed_file(<target> <symbol> <input>): compile the bytes of <input> into <target> as
#   const char <symbol>[];          (NUL appended)
#   const size_t <symbol>_len;      (without the NUL)
# regenerated when <input> changes.
function(tg_embed_file target symbol input)
    set(out ${CMAKE_CURRENT_BINARY_DIR}/${symbol}.c)
    add_custom_command(
        OUTPUT ${out}
        COMMAND ${CMAKE_COMMAND} -DIN=${input} -DOUT=${out} -DSYM=${symbol}
                -P ${PROJECT_SOURCE_DIR}/cmake/embed_file.cmake
        DEPENDS ${input} ${PROJECT_SOURCE_DIR}/cmake/embed_file.cmake
        COMMENT "Embedding ${input}"
        VERBATIM)
    target_sources(${target} PRIVATE ${out})
endfunction()
