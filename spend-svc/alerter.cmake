# spend-svc alerter: Slack webhooks, rate-limited, size-capped, de-duplicated.
# The only module of spend-svc that includes curl.h.
add_library(sp_alerter STATIC
    ${CMAKE_CURRENT_LIST_DIR}/src/alerter.c
    ${CMAKE_CURRENT_LIST_DIR}/src/alert_config.c
    ${CMAKE_CURRENT_LIST_DIR}/src/alert_text.c
    ${CMAKE_CURRENT_LIST_DIR}/src/alert_bucket.c
    ${CMAKE_CURRENT_LIST_DIR}/src/alert_dedupe.c)
target_include_directories(sp_alerter PUBLIC ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(sp_alerter PUBLIC tg_common proto PkgConfig::YAML PkgConfig::JANSSON
    Threads::Threads m PRIVATE PkgConfig::CURL)
