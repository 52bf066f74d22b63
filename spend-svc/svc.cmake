# spend-svc: one library per module, the executable links them.
# Third-party headers: rdkafka.h only in consumer, libpq-fe.h only in pg_sink, hiredis.h only in
# redis_sink, microhttpd.h only in admin_http, yaml.h only in config (and the alerter).
set(SP_SRC ${CMAKE_CURRENT_LIST_DIR}/src)

add_library(sp_config STATIC ${SP_SRC}/config.c)
target_include_directories(sp_config PUBLIC ${SP_SRC})
target_link_libraries(sp_config PUBLIC tg_common tg_kafka_opts PRIVATE tg_yaml PkgConfig::YAML)

add_library(sp_pg_sink STATIC ${SP_SRC}/pg_sink.c)
target_include_directories(sp_pg_sink PUBLIC ${SP_SRC})
target_link_libraries(sp_pg_sink PUBLIC tg_common proto PRIVATE PkgConfig::PQ Threads::Threads)

add_library(sp_redis_sink STATIC ${SP_SRC}/redis_sink.c)
target_include_directories(sp_redis_sink PUBLIC ${SP_SRC})
target_link_libraries(sp_redis_sink PUBLIC tg_common sp_pg_sink
    PRIVATE PkgConfig::HIREDIS Threads::Threads)

add_library(sp_budgets STATIC ${SP_SRC}/budgets.c)
target_include_directories(sp_budgets PUBLIC ${SP_SRC})
target_link_libraries(sp_budgets PUBLIC tg_common sp_pg_sink sp_config
    PRIVATE PkgConfig::JANSSON Threads::Threads)

add_library(sp_consumer STATIC ${SP_SRC}/consumer.c)
target_include_directories(sp_consumer PUBLIC ${SP_SRC})
target_link_libraries(sp_consumer PUBLIC tg_common sp_config
    PRIVATE PkgConfig::RDKAFKA Threads::Threads)

add_library(sp_admin_http STATIC ${SP_SRC}/admin_http.c)
target_include_directories(sp_admin_http PUBLIC ${SP_SRC})
target_link_libraries(sp_admin_http PUBLIC tg_common sp_pg_sink
    PRIVATE PkgConfig::MHD Threads::Threads)

add_executable(spend-svc ${SP_SRC}/main.c)
target_link_libraries(spend-svc PRIVATE sp_config sp_consumer sp_pg_sink sp_redis_sink
    sp_budgets sp_admin_http proto tg_common PkgConfig::JANSSON Threads::Threads)
if(TARGET sp_alerter)
    target_link_libraries(spend-svc PRIVATE sp_alerter)
    target_compile_definitions(spend-svc PRIVATE SP_HAVE_ALERTER=1)
endif()
