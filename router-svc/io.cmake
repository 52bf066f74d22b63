# router-svc I/O modules and the executable. The pure core (rt_core) comes from core.cmake.
set(RT_SRC ${CMAKE_CURRENT_SOURCE_DIR}/src)

add_library(rt_translate STATIC ${RT_SRC}/translate.c ${RT_SRC}/translate_stream.c
            ${RT_SRC}/translate_responses.c ${RT_SRC}/translate_responses_stream.c)
target_include_directories(rt_translate PUBLIC ${RT_SRC})
# the chat side's content and tool-call helpers are the dialects' (providers/dialect.c)
target_link_libraries(rt_translate PUBLIC tg_common rt_providers PkgConfig::JANSSON)

# h1: the built-in client's HTTP/1.1 response parser (no I/O; fuzzed on its own).
add_library(rt_h1 STATIC ${RT_SRC}/h1.c)
target_include_directories(rt_h1 PUBLIC ${RT_SRC})

add_library(rt_sse STATIC ${RT_SRC}/sse.c)
target_include_directories(rt_sse PUBLIC ${RT_SRC})

add_library(rt_upstream STATIC ${RT_SRC}/upstream.c ${RT_SRC}/h1client.c ${RT_SRC}/h1tls.c
            ${RT_SRC}/resolver.c)
target_include_directories(rt_upstream PUBLIC ${RT_SRC})
target_link_libraries(rt_upstream PUBLIC rt_h1 tg_common PkgConfig::CURL PkgConfig::SSL
                      PkgConfig::CRYPTO Threads::Threads)

# hparse: pure HTTP/1.x request framing (no I/O, no dependency): its unit test and the fuzz
# targets link it alone.
add_library(rt_hparse STATIC ${RT_SRC}/hparse.c)
target_include_directories(rt_hparse PUBLIC ${RT_SRC})

add_library(rt_hsrv STATIC ${RT_SRC}/hsrv.c ${RT_SRC}/hs_request.c ${RT_SRC}/hs_response.c ${RT_SRC}/hs_ipcap.c)
target_include_directories(rt_hsrv PUBLIC ${RT_SRC})
target_link_libraries(rt_hsrv PUBLIC rt_hparse tg_common Threads::Threads)

add_library(rt_health STATIC ${RT_SRC}/health.c)
target_include_directories(rt_health PUBLIC ${RT_SRC})
target_link_libraries(rt_health PUBLIC tg_common)

add_library(rt_metrics STATIC ${RT_SRC}/rt_metrics.c ${RT_SRC}/rt_metrics_litellm.c)
target_include_directories(rt_metrics PUBLIC ${RT_SRC})
target_link_libraries(rt_metrics PUBLIC tg_common rt_core)

# creds: provider tokens refreshed on a thread of its own (a standalone upstream), never on the
# request path.
add_library(rt_creds STATIC ${RT_SRC}/creds.c)
target_include_directories(rt_creds PUBLIC ${RT_SRC})
target_link_libraries(rt_creds PUBLIC rt_upstream rt_providers tg_common Threads::Threads)

add_library(rt_call STATIC ${RT_SRC}/call.c ${RT_SRC}/relay.c ${RT_SRC}/api_error.c)
target_include_directories(rt_call PUBLIC ${RT_SRC})
target_link_libraries(rt_call PUBLIC tg_common rt_core rt_metrics rt_upstream rt_translate
                      rt_hsrv rt_sse rt_providers rt_creds PkgConfig::JANSSON)

add_library(rt_http_front STATIC ${RT_SRC}/http_front.c)
target_include_directories(rt_http_front PUBLIC ${RT_SRC})
target_link_libraries(rt_http_front PUBLIC tg_common rt_core rt_metrics rt_call rt_upstream
                      rt_health rt_key_api rt_hsrv PkgConfig::JANSSON
                      Threads::Threads)

# limsync: limiter counts exchanged between replicas through Redis, on a thread of its own
# (common's tg_redis connection); limsync_reply: the check of the script's answer (pure, fuzzed).
add_library(rt_limsync_reply STATIC ${RT_SRC}/limsync_reply.c)
target_include_directories(rt_limsync_reply PUBLIC ${RT_SRC})
target_link_libraries(rt_limsync_reply PUBLIC rt_limiter tg_common PkgConfig::HIREDIS)
add_library(rt_limsync STATIC ${RT_SRC}/limsync.c)
target_include_directories(rt_limsync PUBLIC ${RT_SRC})
target_link_libraries(rt_limsync PUBLIC rt_core rt_limsync_reply tg_redis tg_common
                      Threads::Threads)

add_executable(router-svc ${RT_SRC}/main.c)
target_link_libraries(router-svc PRIVATE rt_http_front rt_core rt_metrics rt_upstream
                      rt_translate rt_health rt_key_api rt_control rt_publisher tg_kafka_topics
                      rt_limsync
                      tg_common)
