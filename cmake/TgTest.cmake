# Test registration helpers. Every test has a label and a timeout.
#
# tg_unit_test(NAME SOURCES a.c b.c LIBS lib1 lib2 [TIMEOUT s])
#   A cmocka executable labelled "unit".
# tg_c_test(NAME LABEL integration SOURCES ... LIBS ... [TIMEOUT s] [ARGS ...])
#   A C test executable with any label.
# tg_script_test(NAME LABEL e2e COMMAND cmd args... [TIMEOUT s])
#   A script test; it sees TG_SOURCE_DIR and TG_BUILD_DIR in its environment.
#
# tests/run runs ctest -j2: a test of tg_c_test or tg_script_test whose label is not "unit" runs
# alone (RUN_SERIAL) unless its name is in TG_PARALLEL_OK (tests/CMakeLists.txt). Its COST is
# the one TG_TEST_COST gives (name, seconds, ...), and a test in TG_OWN_KAFKA_CLUSTER holds the
# lock kafka_cluster_of_its_own while it runs.
function(tg_serial_unless_listed name label)
    if(NOT label STREQUAL "unit" AND NOT name IN_LIST TG_PARALLEL_OK)
        set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
    endif()
    list(FIND TG_TEST_COST ${name} at)
    if(at GREATER_EQUAL 0)
        math(EXPR at "${at} + 1")
        list(GET TG_TEST_COST ${at} cost)
        set_tests_properties(${name} PROPERTIES COST ${cost})
    endif()
    if(name IN_LIST TG_OWN_KAFKA_CLUSTER)
        set_tests_properties(${name} PROPERTIES RESOURCE_LOCK kafka_cluster_of_its_own)
    endif()
endfunction()

function(tg_unit_test name)
    cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
    if(NOT T_TIMEOUT)
        set(T_TIMEOUT 60)
    endif()
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${T_TIMEOUT}
        ENVIRONMENT "TG_SOURCE_DIR=${PROJECT_SOURCE_DIR};TG_BUILD_DIR=${PROJECT_BINARY_DIR}")
endfunction()

function(tg_c_test name)
    cmake_parse_arguments(T "" "TIMEOUT;LABEL" "SOURCES;LIBS;ARGS" ${ARGN})
    if(NOT T_TIMEOUT)
        set(T_TIMEOUT 120)
    endif()
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
    add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
    set_tests_properties(${name} PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT}
        ENVIRONMENT "TG_SOURCE_DIR=${PROJECT_SOURCE_DIR};TG_BUILD_DIR=${PROJECT_BINARY_DIR}")
    tg_serial_unless_listed(${name} ${T_LABEL})
endfunction()

function(tg_script_test name)
    cmake_parse_arguments(T "" "TIMEOUT;LABEL" "COMMAND" ${ARGN})
    if(NOT T_TIMEOUT)
        set(T_TIMEOUT 300)
    endif()
    add_test(NAME ${name} COMMAND ${T_COMMAND})
    set_tests_properties(${name} PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT}
        ENVIRONMENT "TG_SOURCE_DIR=${PROJECT_SOURCE_DIR};TG_BUILD_DIR=${PROJECT_BINARY_DIR}")
    tg_serial_unless_listed(${name} ${T_LABEL})
endfunction()
