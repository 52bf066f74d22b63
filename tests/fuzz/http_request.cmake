# Fuzz targets for router-svc's request framing (hparse), included from tests/fuzz/CMakeLists.txt.
# - http_request_fuzz: hparse driven as the HTTP server drives it (hp_conn.c), whole against
#   split feeds. Corpus: corpus/http_request.
# - http_diff_fuzz: one request through hparse and through nodejs/http-parser (Debian's
#   libhttp-parser-dev); hparse may not accept what http_parser rejects. Corpus: corpus/http_diff,
#   and it replays corpus/http_request too.
# Each corpus is replayed in every build as a unit test (fuzz_replay_main.c); the libFuzzer
# binaries are built only with -DTG_FUZZ=ON and clang:
#   CC=clang cmake -S . -B build/fuzz -DTG_FUZZ=ON
#   cmake --build build/fuzz --target http_request_fuzz http_diff_fuzz
#   build/fuzz/tests/unit/fuzz/http_request_fuzz -dict=tests/fuzz/http_request.dict \
#       -max_total_time=600 <scratch dir> tests/fuzz/corpus/http_request
# hparse.c is compiled into each libFuzzer binary so that it carries the coverage
# instrumentation; the replays link rt_hparse.
if(NOT TARGET rt_hparse)
    return()
endif()

# http_parser has no pkg-config file: header and library are looked up directly.
find_path(HTTP_PARSER_INCLUDE_DIR http_parser.h)
find_library(HTTP_PARSER_LIBRARY NAMES http_parser)
if(NOT HTTP_PARSER_INCLUDE_DIR OR NOT HTTP_PARSER_LIBRARY)
    message(FATAL_ERROR "http_parser (header http_parser.h, library libhttp_parser) not found: "
                        "the differential check of the request framing (tests/fuzz/http_diff.c) "
                        "needs it. Install Debian's libhttp-parser-dev (tests/lib/deps.sh does).")
endif()

set(HTTP_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR})
set(HTTP_FUZZ_CORPUS ${HTTP_FUZZ_DIR}/corpus)

add_executable(http_request_fuzz_replay ${HTTP_FUZZ_DIR}/fuzz_replay_main.c
               ${HTTP_FUZZ_DIR}/http_request_fuzz.c ${HTTP_FUZZ_DIR}/hp_conn.c)
target_link_libraries(http_request_fuzz_replay PRIVATE rt_hparse)
add_test(NAME http_request_fuzz_replay
         COMMAND http_request_fuzz_replay ${HTTP_FUZZ_CORPUS}/http_request)
set_tests_properties(http_request_fuzz_replay PROPERTIES LABELS unit TIMEOUT 120)

add_executable(http_diff_replay ${HTTP_FUZZ_DIR}/fuzz_replay_main.c ${HTTP_FUZZ_DIR}/http_diff.c
               ${HTTP_FUZZ_DIR}/hp_conn.c)
target_include_directories(http_diff_replay PRIVATE ${HTTP_PARSER_INCLUDE_DIR})
target_link_libraries(http_diff_replay PRIVATE rt_hparse ${HTTP_PARSER_LIBRARY})
add_test(NAME http_diff_replay
         COMMAND http_diff_replay ${HTTP_FUZZ_CORPUS}/http_request ${HTTP_FUZZ_CORPUS}/http_diff)
set_tests_properties(http_diff_replay PROPERTIES LABELS unit TIMEOUT 120)

if(TG_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
    set(HTTP_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined)
    add_executable(http_request_fuzz ${HTTP_FUZZ_DIR}/http_request_fuzz.c
                   ${HTTP_FUZZ_DIR}/hp_conn.c ${PROJECT_SOURCE_DIR}/router-svc/src/hparse.c)
    target_include_directories(http_request_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/router-svc/src)

    add_executable(http_diff_fuzz ${HTTP_FUZZ_DIR}/http_diff.c ${HTTP_FUZZ_DIR}/hp_conn.c
                   ${PROJECT_SOURCE_DIR}/router-svc/src/hparse.c)
    target_include_directories(http_diff_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/router-svc/src
                               ${HTTP_PARSER_INCLUDE_DIR})
    target_link_libraries(http_diff_fuzz PRIVATE ${HTTP_PARSER_LIBRARY})

    foreach(t http_request_fuzz http_diff_fuzz)
        target_compile_options(${t} PRIVATE ${HTTP_FUZZ_FLAGS})
        target_link_options(${t} PRIVATE ${HTTP_FUZZ_FLAGS})
    endforeach()
elseif(TG_FUZZ)
    message(STATUS "TG_FUZZ: http_request_fuzz and http_diff_fuzz need clang (CC=clang); "
                   "only the replays are built")
endif()
