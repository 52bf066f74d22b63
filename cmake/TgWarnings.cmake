# Compiler flags shared by every target.
add_compile_options(-Wall -Wextra -Wshadow -Wformat=2 -Wstrict-prototypes
                    -Wmissing-prototypes -Wvla -fno-common)
add_compile_definitions(_GNU_SOURCE)
if(TG_WERROR)
    add_compile_options(-Werror)
endif()
if(TG_SANITIZE)
    add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                        -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=address,undefined)
endif()
