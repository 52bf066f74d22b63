# router-svc: the control topic key store (rt_control: Kafka + snapshot file) and the key admin
# API logic (rt_key_api, independent of the HTTP server). Included from router-svc/CMakeLists.txt.
add_library(rt_control STATIC ${CMAKE_CURRENT_SOURCE_DIR}/src/control.c
                               ${CMAKE_CURRENT_SOURCE_DIR}/src/control_snapshot.c)
target_include_directories(rt_control PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(rt_control PUBLIC rt_keys rt_teams rt_config tg_common tg_kafka_opts
                      PkgConfig::RDKAFKA Threads::Threads)

add_library(rt_key_api STATIC ${CMAKE_CURRENT_SOURCE_DIR}/src/key_api.c
            ${CMAKE_CURRENT_SOURCE_DIR}/src/team_api.c ${CMAKE_CURRENT_SOURCE_DIR}/src/admin_answer.c)
target_include_directories(rt_key_api PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(rt_key_api PUBLIC rt_control rt_keys rt_teams rt_config tg_common
                      PkgConfig::JANSSON Threads::Threads)
