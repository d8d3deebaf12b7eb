// Declarations of exactly the Foundation API that metal_objc.mm uses (directly or through Objective-C
// literals), for its syntax check on Linux (src-test/test_metal_objc_check.py). Not used on a Mac,
// where <Foundation/Foundation.h> is imported instead. Each declaration names its Apple documentation
// page (https://developer.apple.com/documentation/foundation/...).
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef long NSInteger;            // .../objectivec/nsinteger
typedef unsigned long NSUInteger;  // .../objectivec/nsuinteger
typedef bool BOOL;                 // .../objectivec/bool (bool on arm64; signed char only on x86-64)
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#define nil nullptr  // .../objectivec/nil (Objective-C++)

// .../objectivec/nscopying
@protocol NSCopying
@end

// .../objectivec/nsobject-swift.class: +alloc, -init
@interface NSObject
+ (instancetype)alloc;
- (instancetype)init;
@end

// .../foundation/nsstring: +stringWithUTF8String:, -UTF8String
@interface NSString : NSObject <NSCopying>
+ (instancetype)stringWithUTF8String:(const char*)nullTerminatedCString;
@property(readonly) const char* UTF8String;
@end

// .../foundation/nserror: -localizedDescription
@interface NSError : NSObject
@property(readonly, copy) NSString* localizedDescription;
@end

// .../foundation/nsexceptionname
typedef NSString* NSExceptionName;

// .../foundation/nsexception: -name, -reason (MPS raises NSException on invalid descriptors)
@interface NSException : NSObject
@property(readonly, copy) NSExceptionName name;
@property(readonly, copy) NSString* reason;
@end

// .../foundation/nsnumber: what the boxed literals @(x) call
@interface NSNumber : NSObject <NSCopying>
+ (NSNumber*)numberWithInt:(int)value;
+ (NSNumber*)numberWithLongLong:(long long)value;
@end

// .../foundation/nsarray: what the array literals @[...] call
@interface NSArray<ObjectType> : NSObject <NSCopying>
+ (instancetype)arrayWithObjects:(const ObjectType[])objects count:(NSUInteger)cnt;
@end

// .../foundation/nsdictionary: +dictionary
@interface NSDictionary<KeyType, ObjectType> : NSObject <NSCopying>
+ (instancetype)dictionary;
@end

// .../foundation/nsmutabledictionary: -setObject:forKey:
@interface NSMutableDictionary<KeyType, ObjectType> : NSDictionary<KeyType, ObjectType>
- (void)setObject:(ObjectType)anObject forKey:(KeyType<NSCopying>)aKey;
@end
