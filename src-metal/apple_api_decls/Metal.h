// Declarations of exactly the Metal API that metal_objc.mm uses, for its syntax check on Linux
// (src-test/test_metal_objc_check.py). Not used on a Mac, where <Metal/Metal.h> is imported.
// Each declaration names its Apple documentation page (https://developer.apple.com/documentation/metal/...).
#pragma once
#include "Foundation.h"

// .../metal/mtlsize, .../metal/mtlsizemake(_:_:_:)
typedef struct {
    NSUInteger width, height, depth;
} MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
    MTLSize s = {width, height, depth};
    return s;
}

// .../metal/mtlresourceoptions, .../metal/mtlresourceoptions/storagemodeshared
typedef NSUInteger MTLResourceOptions;
enum { MTLResourceStorageModeShared = 0 << 4 };

// .../metal/mtlcommandbufferstatus
typedef enum : NSUInteger {
    MTLCommandBufferStatusNotEnqueued = 0,
    MTLCommandBufferStatusEnqueued = 1,
    MTLCommandBufferStatusCommitted = 2,
    MTLCommandBufferStatusScheduled = 3,
    MTLCommandBufferStatusCompleted = 4,
    MTLCommandBufferStatusError = 5,
} MTLCommandBufferStatus;

// .../metal/mtlbuffer: contents(), length
@protocol MTLBuffer
- (void*)contents;
@property(readonly) NSUInteger length;
@end

// .../metal/mtlfunction
@protocol MTLFunction
@end

// .../metal/mtllibrary/makefunction(name:) (newFunctionWithName:)
@protocol MTLLibrary
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
@end

// .../metal/mtlcomputepipelinestate: maxTotalThreadsPerThreadgroup, threadExecutionWidth
@protocol MTLComputePipelineState
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property(readonly) NSUInteger threadExecutionWidth;
@end

// .../metal/mtlcommandencoder/endencoding()
@protocol MTLCommandEncoder
- (void)endEncoding;
@end

// .../metal/mtlcomputecommandencoder: setComputePipelineState(_:), setBytes(_:length:index:),
// setBuffer(_:offset:index:), dispatchThreadgroups(_:threadsPerThreadgroup:)
@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
@end

// .../metal/mtlblitcommandencoder/copy(from:sourceoffset:to:destinationoffset:size:)
@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
@end

// .../metal/mtlcommandbuffer: makeComputeCommandEncoder(), makeBlitCommandEncoder(), commit(),
// waitUntilCompleted(), status, error
@protocol MTLCommandBuffer
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (void)commit;
- (void)waitUntilCompleted;
@property(readonly) MTLCommandBufferStatus status;
@property(readonly) NSError* error;
@end

// .../metal/mtlcommandqueue/makecommandbuffer() (the queue is handed to MPSCommandBuffer)
@protocol MTLCommandQueue
@end

// .../metal/mtlcompileoptions/fastmathenabled
@interface MTLCompileOptions : NSObject <NSCopying>
@property(readwrite, nonatomic) BOOL fastMathEnabled;
@end

// .../metal/mtldevice: name, makeCommandQueue(), makeBuffer(length:options:),
// makeBuffer(bytes:length:options:), makeLibrary(source:options:), makeComputePipelineState(function:),
// recommendedMaxWorkingSetSize
@protocol MTLDevice
@property(readonly) NSString* name;
@property(readonly) uint64_t recommendedMaxWorkingSetSize;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytes:(const void*)pointer length:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                             error:(NSError**)error;
@end

// .../metal/mtlcreatesystemdefaultdevice()
id<MTLDevice> MTLCreateSystemDefaultDevice(void);
