# router-svc: the event spool and the Kafka publisher.
add_library(rt_spool STATIC src/spool.c)
target_include_directories(rt_spool PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(rt_spool PUBLIC tg_common Threads::Threads)

add_library(rt_publisher STATIC src/publisher.c)
target_include_directories(rt_publisher PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(rt_publisher PUBLIC rt_spool proto tg_common tg_kafka_opts PkgConfig::RDKAFKA Threads::Threads)
