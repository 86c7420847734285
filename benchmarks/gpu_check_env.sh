# Sourced by gpu_check_prepare.sh --build and gpu_check.sh: point the extension's CMake build at
# the libjpeg-turbo unpacked in .gpu_check/jpeg, not the system's (the GPU image has none).
# Debian's libjpeg.a is not position-independent, so the extension links the shared
# libjpeg.so.62 and finds it at run time through an rpath to that folder (LD_LIBRARY_PATH too,
# for processes that load it some other way).
JPEG_ROOT="$PWD/.gpu_check/jpeg"
JPEG_LIB=$(find "$JPEG_ROOT" -name "libjpeg.so" | head -n1)
JPEG_LIB_DIR=$(dirname "$JPEG_LIB")
JPEG_ARCH_INCLUDE=$(dirname "$(find "$JPEG_ROOT/usr/include" -name jconfig.h | head -n1)")
export SKBUILD_CMAKE_ARGS="-DJPEG_INCLUDE_DIR=$JPEG_ROOT/usr/include;-DJPEG_LIBRARY=$JPEG_LIB;-DJPEG_LIBRARY_RELEASE=$JPEG_LIB;-DCMAKE_CXX_FLAGS=-isystem $JPEG_ARCH_INCLUDE;-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath,$JPEG_LIB_DIR;-DCMAKE_MODULE_LINKER_FLAGS=-Wl,-rpath,$JPEG_LIB_DIR"
export LD_LIBRARY_PATH="$JPEG_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
