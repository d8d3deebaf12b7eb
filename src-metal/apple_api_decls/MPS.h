// Declarations of exactly the Metal Performance Shaders and MPSGraph API that metal_objc.mm uses,
// for its syntax check on Linux (src-test/test_metal_objc_check.py). Not used on a Mac, where the
// framework headers are imported. Each declaration names its Apple documentation page
// (https://developer.apple.com/documentation/metalperformanceshaders/... and .../metalperformanceshadersgraph/...).
#pragma once
#include "Metal.h"

// ---- MetalPerformanceShaders ----

// .../metalperformanceshaders/mpsdatatype (float32 = floatBit | 32)
typedef enum : uint32_t {
    MPSDataTypeFloatBit = 0x10000000,
    MPSDataTypeFloat32 = 0x10000000 | 32,
} MPSDataType;

// .../metalperformanceshaders/mpssupportsmtldevice(_:)
BOOL MPSSupportsMTLDevice(id<MTLDevice> device);

// .../metalperformanceshaders/mpscommandbuffer, .../mpscommandbuffer/init(from:)
// (+commandBufferFromCommandQueue:)
// .../mpscommandbuffer/rootcommandbuffer (the MTLCommandBuffer that commitAndContinue commits)
@interface MPSCommandBuffer : NSObject <MTLCommandBuffer>
+ (instancetype)commandBufferFromCommandQueue:(id<MTLCommandQueue>)commandQueue;
@property (readonly, retain, nonatomic) id<MTLCommandBuffer> rootCommandBuffer;
@end

// .../metalperformanceshaders/mpsmatrixdescriptor/init(rows:columns:rowbytes:datatype:)
// (+matrixDescriptorWithRows:columns:rowBytes:dataType:)
@interface MPSMatrixDescriptor : NSObject
+ (MPSMatrixDescriptor*)matrixDescriptorWithRows:(NSUInteger)rows
                                         columns:(NSUInteger)columns
                                        rowBytes:(NSUInteger)rowBytes
                                        dataType:(MPSDataType)dataType;
@end

// .../metalperformanceshaders/mpsmatrix/init(buffer:offset:descriptor:)
@interface MPSMatrix : NSObject
- (instancetype)initWithBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset descriptor:(MPSMatrixDescriptor*)descriptor;
@end

// .../metalperformanceshaders/mpskernel
@interface MPSKernel : NSObject <NSCopying>
@end

// .../metalperformanceshaders/mpsmatrixmultiplication/init(device:transposeleft:transposeright:resultrows:resultcolumns:interiorcolumns:alpha:beta:)
// .../metalperformanceshaders/mpsmatrixmultiplication/encode(commandbuffer:leftmatrix:rightmatrix:resultmatrix:)
@interface MPSMatrixMultiplication : MPSKernel
- (instancetype)initWithDevice:(id<MTLDevice>)device
                 transposeLeft:(BOOL)transposeLeft
                transposeRight:(BOOL)transposeRight
                    resultRows:(NSUInteger)resultRows
                 resultColumns:(NSUInteger)resultColumns
               interiorColumns:(NSUInteger)interiorColumns
                         alpha:(double)alpha
                          beta:(double)beta;
- (void)encodeToCommandBuffer:(id<MTLCommandBuffer>)commandBuffer
                   leftMatrix:(MPSMatrix*)leftMatrix
                  rightMatrix:(MPSMatrix*)rightMatrix
                 resultMatrix:(MPSMatrix*)resultMatrix;
@end

// ---- MetalPerformanceShadersGraph ----

// .../metalperformanceshaders/mpsshape
typedef NSArray<NSNumber*> MPSShape;

// .../metalperformanceshadersgraph/mpsgraphtensor
@interface MPSGraphTensor : NSObject <NSCopying>
@end

// .../metalperformanceshadersgraph/mpsgraphoperation
@interface MPSGraphOperation : NSObject
@end

// .../metalperformanceshadersgraph/mpsgraphtensordata/init(_:shape:datatype:) (initWithMTLBuffer:shape:dataType:)
@interface MPSGraphTensorData : NSObject
- (instancetype)initWithMTLBuffer:(id<MTLBuffer>)buffer shape:(MPSShape*)shape dataType:(MPSDataType)dataType;
@end

// .../metalperformanceshadersgraph/mpsgraphtensordatadictionary
typedef NSDictionary<MPSGraphTensor*, MPSGraphTensorData*> MPSGraphTensorDataDictionary;

// .../metalperformanceshadersgraph/mpsgraphcompletionhandler
typedef void (^MPSGraphCompletionHandler)(MPSGraphTensorDataDictionary* resultsDictionary, NSError* error);

// .../metalperformanceshadersgraph/mpsgraphexecutiondescriptor, .../completionhandler
@interface MPSGraphExecutionDescriptor : NSObject
@property (readwrite, atomic) MPSGraphCompletionHandler completionHandler;
@end

// .../metalperformanceshadersgraph/mpsgraphpaddingstyle
typedef enum : NSUInteger {
    MPSGraphPaddingStyleExplicit = 0,
    MPSGraphPaddingStyleTF_VALID = 1,
    MPSGraphPaddingStyleTF_SAME = 2,
} MPSGraphPaddingStyle;

// .../metalperformanceshadersgraph/mpsgraphtensornameddatalayout
typedef enum : NSUInteger {
    MPSGraphTensorNamedDataLayoutNCHW = 0,
    MPSGraphTensorNamedDataLayoutNHWC = 1,
    MPSGraphTensorNamedDataLayoutOIHW = 2,
    MPSGraphTensorNamedDataLayoutHWIO = 3,
} MPSGraphTensorNamedDataLayout;

// .../metalperformanceshadersgraph/mpsgraphconvolution2dopdescriptor/init(strideinx:strideiny:dilationrateinx:dilationrateiny:groups:paddingleft:paddingright:paddingtop:paddingbottom:paddingstyle:datalayout:weightslayout:)
@interface MPSGraphConvolution2DOpDescriptor : NSObject <NSCopying>
+ (instancetype)descriptorWithStrideInX:(NSUInteger)strideInX
                              strideInY:(NSUInteger)strideInY
                        dilationRateInX:(NSUInteger)dilationRateInX
                        dilationRateInY:(NSUInteger)dilationRateInY
                                 groups:(NSUInteger)groups
                            paddingLeft:(NSUInteger)paddingLeft
                           paddingRight:(NSUInteger)paddingRight
                             paddingTop:(NSUInteger)paddingTop
                          paddingBottom:(NSUInteger)paddingBottom
                           paddingStyle:(MPSGraphPaddingStyle)paddingStyle
                             dataLayout:(MPSGraphTensorNamedDataLayout)dataLayout
                          weightsLayout:(MPSGraphTensorNamedDataLayout)weightsLayout;
@end

// .../metalperformanceshadersgraph/mpsgraphpooling2dopdescriptor/init(kernelwidth:kernelheight:strideinx:strideiny:dilationrateinx:dilationrateiny:paddingleft:paddingright:paddingtop:paddingbottom:paddingstyle:datalayout:)
// .../metalperformanceshadersgraph/mpsgraphpooling2dopdescriptor/includezeropadtoaverage
@interface MPSGraphPooling2DOpDescriptor : NSObject <NSCopying>
+ (instancetype)descriptorWithKernelWidth:(NSUInteger)kernelWidth
                             kernelHeight:(NSUInteger)kernelHeight
                                strideInX:(NSUInteger)strideInX
                                strideInY:(NSUInteger)strideInY
                          dilationRateInX:(NSUInteger)dilationRateInX
                          dilationRateInY:(NSUInteger)dilationRateInY
                              paddingLeft:(NSUInteger)paddingLeft
                             paddingRight:(NSUInteger)paddingRight
                               paddingTop:(NSUInteger)paddingTop
                            paddingBottom:(NSUInteger)paddingBottom
                             paddingStyle:(MPSGraphPaddingStyle)paddingStyle
                               dataLayout:(MPSGraphTensorNamedDataLayout)dataLayout;
@property(readwrite, nonatomic) BOOL includeZeroPadToAverage;
@end

// .../metalperformanceshadersgraph/mpsgraph
@interface MPSGraph : NSObject
// .../mpsgraph/placeholder(shape:datatype:name:)
- (MPSGraphTensor*)placeholderWithShape:(MPSShape*)shape dataType:(MPSDataType)dataType name:(NSString*)name;
// .../mpsgraph/constant(_:datatype:) (constantWithScalar:dataType:)
- (MPSGraphTensor*)constantWithScalar:(double)scalar dataType:(MPSDataType)dataType;
// .../mpsgraph/addition(_:_:name:), subtraction, multiplication, division, squareroot(with:name:)
- (MPSGraphTensor*)additionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                             secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                        name:(NSString*)name;
- (MPSGraphTensor*)subtractionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                           name:(NSString*)name;
- (MPSGraphTensor*)multiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                   secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                              name:(NSString*)name;
- (MPSGraphTensor*)divisionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                             secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                        name:(NSString*)name;
- (MPSGraphTensor*)squareRootWithTensor:(MPSGraphTensor*)tensor name:(NSString*)name;
// .../mpsgraph/reductionsum(with:axes:name:)
- (MPSGraphTensor*)reductionSumWithTensor:(MPSGraphTensor*)tensor axes:(NSArray<NSNumber*>*)axes name:(NSString*)name;
// .../mpsgraph/mean(of:axes:name:), .../mpsgraph/variance(of:mean:axes:name:)
- (MPSGraphTensor*)meanOfTensor:(MPSGraphTensor*)tensor axes:(NSArray<NSNumber*>*)axes name:(NSString*)name;
- (MPSGraphTensor*)varianceOfTensor:(MPSGraphTensor*)tensor
                         meanTensor:(MPSGraphTensor*)meanTensor
                               axes:(NSArray<NSNumber*>*)axes
                               name:(NSString*)name;
// .../mpsgraph/convolution2d(_:weights:descriptor:name:)
- (MPSGraphTensor*)convolution2DWithSourceTensor:(MPSGraphTensor*)source
                                   weightsTensor:(MPSGraphTensor*)weights
                                      descriptor:(MPSGraphConvolution2DOpDescriptor*)descriptor
                                            name:(NSString*)name;
// .../mpsgraph/convolution2ddatagradient(_:weights:outputshape:forwardconvolutiondescriptor:name:)
- (MPSGraphTensor*)convolution2DDataGradientWithIncomingGradientTensor:(MPSGraphTensor*)incomingGradient
                                                         weightsTensor:(MPSGraphTensor*)weights
                                                           outputShape:(MPSShape*)outputShape
                                          forwardConvolutionDescriptor:(MPSGraphConvolution2DOpDescriptor*)forwardConvolutionDescriptor
                                                                  name:(NSString*)name;
// .../mpsgraph/convolution2dweightsgradient(_:source:outputshape:forwardconvolutiondescriptor:name:)
- (MPSGraphTensor*)convolution2DWeightsGradientWithIncomingGradientTensor:(MPSGraphTensor*)incomingGradient
                                                             sourceTensor:(MPSGraphTensor*)source
                                                              outputShape:(MPSShape*)outputShape
                                             forwardConvolutionDescriptor:(MPSGraphConvolution2DOpDescriptor*)forwardConvolutionDescriptor
                                                                     name:(NSString*)name;
// .../mpsgraph/maxpooling2d(withsourcetensor:descriptor:name:), .../mpsgraph/avgpooling2d(withsourcetensor:descriptor:name:)
- (MPSGraphTensor*)maxPooling2DWithSourceTensor:(MPSGraphTensor*)source
                                     descriptor:(MPSGraphPooling2DOpDescriptor*)descriptor
                                           name:(NSString*)name;
- (MPSGraphTensor*)avgPooling2DWithSourceTensor:(MPSGraphTensor*)source
                                     descriptor:(MPSGraphPooling2DOpDescriptor*)descriptor
                                           name:(NSString*)name;
// .../mpsgraph/maxpooling2dgradient(withgradienttensor:sourcetensor:descriptor:name:),
// .../mpsgraph/avgpooling2dgradient(withgradienttensor:sourcetensor:descriptor:name:)
- (MPSGraphTensor*)maxPooling2DGradientWithGradientTensor:(MPSGraphTensor*)gradient
                                             sourceTensor:(MPSGraphTensor*)source
                                               descriptor:(MPSGraphPooling2DOpDescriptor*)descriptor
                                                     name:(NSString*)name;
- (MPSGraphTensor*)avgPooling2DGradientWithGradientTensor:(MPSGraphTensor*)gradient
                                             sourceTensor:(MPSGraphTensor*)source
                                               descriptor:(MPSGraphPooling2DOpDescriptor*)descriptor
                                                     name:(NSString*)name;
// .../mpsgraph/encode(to:feeds:targetoperations:resultsdictionary:executiondescriptor:) (macOS 12)
- (void)encodeToCommandBuffer:(MPSCommandBuffer*)commandBuffer
                        feeds:(MPSGraphTensorDataDictionary*)feeds
             targetOperations:(NSArray<MPSGraphOperation*>*)targetOperations
            resultsDictionary:(MPSGraphTensorDataDictionary*)resultsDictionary
          executionDescriptor:(MPSGraphExecutionDescriptor*)executionDescriptor;
@end
